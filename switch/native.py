"""The native backend's loader: compile a Program's C once, load it, keep its state in sync.

switch/compile_c.py turns a compiled Program into C; this module builds that with the C
compiler Debian's build-essential provides (`cc`), caches the shared object by the hash
of its source (a program loads in milliseconds the second time), and loads it with
ctypes. The Program's Python objects stay the control plane's view: P4Runtime and the
ctl CLI keep editing `Table`s and `ActionProfile`s, which tell this module (`on_change`)
what changed: an entry inserted, modified or deleted changes that one entry's place in the
table's arrays for the C lookup (`TableArrays`), anything else rebuilds them, and a
P4Runtime Write's slice of updates reaches the lookup at once (`NativeProgram.batched`).
Registers and counters move into arrays the C code writes in place and P4Runtime reads
without stopping anything.

A Program runs either natively or in Python, never both: attaching a NativeProgram
moves its registers' and counters' cells into arrays (the same objects, so whoever holds
them reads the live values), which its Python functions are not written for. Where no
compiler exists or the program uses what the C path refuses, `NativeUnavailable` says
why and the switch keeps the Python path.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ecntune.cache import cache_root
from ecntune.switch.compile_c import CCompiler
from ecntune.switch.layout import Unsupported
from ecntune.switch.program import Program
from ecntune.switch.tables import ActionCall, ActionProfile, Entry, Table, TableChange, scan_order

RUNTIME_H = Path(__file__).with_name("native_runtime.h")
LOOP_C = Path(__file__).with_name("native_loop.c")  # the data-plane loop, compiled alongside
CC_FLAGS = ("-O2", "-shared", "-fPIC", "-w")
U64 = ctypes.c_uint64
ALL_ONES = (1 << 64) - 1


class NativeUnavailable(RuntimeError):
    """The native path cannot run this program here; the text says why."""


class NativePkt(ctypes.Structure):
    """native_runtime.h's ect_pkt (runtime.Pkt's attributes, one u64 each)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        *((name, U64) for name in (
            "len", "pos", "length", "error", "cksum_error", "learn_id", "clone_session",
            "clone_fl", "resubmit", "recirculate", "truncate", "exit", "fault",
        )),
    ]  # fmt: skip


class NativeTable(ctypes.Structure):
    """native_runtime.h's ect_table: entries in first-match order and the calls they run."""

    _fields_ = [
        ("n_entries", ctypes.c_int64),
        ("n_keys", ctypes.c_int64),
        ("match", ctypes.c_void_p),
        ("first", ctypes.c_void_p),
        ("count", ctypes.c_void_p),
        ("group", ctypes.c_void_p),
        ("action", ctypes.c_void_p),
        ("data", ctypes.c_void_p),
        ("data_stride", ctypes.c_int64),
        ("default_first", ctypes.c_int64),
        ("default_count", ctypes.c_int64),
    ]


def cache_dir() -> Path:
    return Path(os.environ.get("ECNTUNE_NATIVE_CACHE", cache_root() / "native"))


def c_compiler() -> str | None:
    """The C compiler the native path uses ($CC, else cc), or None where there is none."""
    return shutil.which(os.environ.get("CC", "cc"))


def build(source: str) -> Path:
    """The shared object for `source`, compiled once and cached by the hash of what built it."""
    cc = c_compiler()
    if cc is None:
        raise NativeUnavailable("no C compiler (install build-essential, or set CC)")
    digest = hashlib.sha256("\0".join([cc, *CC_FLAGS, source]).encode()).hexdigest()[:24]
    out = cache_dir() / f"p4-{digest}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        c_file, so_file = Path(tmp) / "program.c", Path(tmp) / "program.so"
        c_file.write_text(source)
        done = subprocess.run(
            [cc, *CC_FLAGS, "-o", str(so_file), str(c_file)], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise NativeUnavailable(f"{cc} failed on the generated C: {done.stderr[-2000:]}")
        os.replace(so_file, out)  # atomic: a concurrent loader sees all of it or nothing
    return out


def load_private(shared_object: Path) -> ctypes.CDLL:
    """Load a private instance: dlopen returns the already loaded object for a file it has
    seen, and two switches (or two loads of one program) must not share tables and queues."""
    with tempfile.NamedTemporaryFile(suffix=".so", dir=shared_object.parent) as copy:
        copy.write(shared_object.read_bytes())
        copy.flush()
        return ctypes.CDLL(copy.name)  # mapped: the file may go


class NativeProgram:
    """A Program's parser, controls and deparser running as compiled C (module docstring)."""

    def __init__(self, program: Program) -> None:
        try:
            cc = CCompiler(program)
            source = cc.source(RUNTIME_H.read_text()) + LOOP_C.read_text()
        except Unsupported as e:
            raise NativeUnavailable(str(e)) from e
        self.program = program
        self.source = source
        self.lib = load_private(build(source))
        self.n_slots = program.layout.n_slots
        self.data_stride = cc.data_stride
        ptr = ctypes.POINTER(NativePkt)
        for name in ("ect_parse", "ect_ingress", "ect_egress"):
            getattr(self.lib, name).argtypes = [ctypes.c_void_p, ptr]
        self.lib.ect_deparse.argtypes = [ctypes.c_void_p, ptr, ctypes.c_void_p, U64]
        self.lib.ect_deparse.restype = ctypes.c_int64
        self.lib.ect_seed.argtypes = [U64]
        self._bind_externs(cc)
        self._tables = cc.tables
        self._entries: list[object] = [None] * len(cc.tables)  # arrays the C code points at
        self._mirrors: list[TableArrays | None] = [None] * len(cc.tables)
        self._batch: Batch | None = None  # inside batched()
        self._slots = (ctypes.c_void_p * max(len(cc.tables), 1)).in_dll(self.lib, "ect_tab")
        for i, name in enumerate(cc.tables):
            self.sync_table(i)
            program.tables[name].on_change = lambda change, entry, i=i: self._on_table_change(
                i, change, entry
            )
        for profile in program.profiles.values():
            profile.on_change = lambda p=profile: self.sync_profile(p)

    def _bind_externs(self, cc: CCompiler) -> None:
        prog = self.program
        regs = (ctypes.c_void_p * max(len(cc.registers), 1)).in_dll(self.lib, "ect_reg")
        for i, name in enumerate(cc.registers):  # the same objects: P4Runtime holds them
            reg = prog.registers[name]
            reg.values = np.array(reg.values, dtype=np.uint64)
            regs[i] = reg.values.ctypes.data
        n = max(len(cc.counters), 1)
        pkts = (ctypes.c_void_p * n).in_dll(self.lib, "ect_cnt_pkts")
        byts = (ctypes.c_void_p * n).in_dll(self.lib, "ect_cnt_bytes")
        for i, name in enumerate(cc.counters):
            c = prog.counters[name]
            c.packets = np.array(c.packets, dtype=np.uint64)
            c.bytes = np.array(c.bytes, dtype=np.uint64)
            pkts[i], byts[i] = c.packets.ctypes.data, c.bytes.ctypes.data

    # -- tables: Python's entries -> C arrays, on every change ------------------------------

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Table changes made inside reach the C lookup together when it ends, each changed
        table swapped in once instead of once per change, and a table changed in many places
        rebuilt once instead (a P4Runtime Write's slice of updates: packets see every table
        as it was before the slice or after it)."""
        if self._batch is not None:  # nested: the outermost publishes
            yield
            return
        self._batch = Batch()
        try:
            yield
        finally:
            batch, self._batch = self._batch, None
            for i in sorted(batch.rebuild):
                self.sync_table(i)
            for i in sorted(batch.changed - batch.rebuild):
                self._publish(i)

    def _changed(self, i: int) -> None:
        """Table i's mirror changed: swap it in now, or at the batch's end."""
        if self._batch is None:
            self._publish(i)
        else:
            self._batch.changed.add(i)

    def _rebuild(self, i: int) -> None:
        """Table i's mirror must be built from every entry: now, or once at the batch's end."""
        if self._batch is None:
            self.sync_table(i)
        else:
            self._batch.rebuild.add(i)

    def sync_profile(self, profile: ActionProfile) -> None:
        for i, name in enumerate(self._tables):
            if self.program.tables[name].profile is profile:
                self._rebuild(i)

    def _on_table_change(self, i: int, change: TableChange, entry: Entry | None) -> None:
        """One entry in, out or changed costs one entry's arrays and a few array copies (issue
        21: a full rebuild made every insert O(table) in Python), up to the point in a batch
        where one rebuild at its end is cheaper (Batch.crowded)."""
        mirror = self._mirrors[i]
        assert mirror is not None  # every table is synced once before its on_change is set
        if change == "default":
            self._changed(i)
        elif entry is None or (self._batch is not None and self._batch.crowded(i, mirror)):
            self._rebuild(i)
        else:
            if change != "insert":
                mirror.remove(entry)
            if change != "delete":
                table = self.program.tables[self._tables[i]]
                mirror.insert(entry, self._entry_arrays(table, [entry]))
            self._changed(i)

    def sync_table(self, i: int) -> None:
        """Rebuild table i's arrays from all its entries, then swap them in."""
        table = self.program.tables[self._tables[i]]
        order = first_match_order(table)
        entries = sorted(table.entries.values(), key=order)
        self._mirrors[i] = TableArrays(order, [order(e) for e in entries],
                                       *self._entry_arrays(table, entries))  # fmt: skip
        self._changed(i)

    def _entry_arrays(self, table: Table, entries: list[Entry]) -> EntryArrays:
        """match, count, group, action, data for `entries`, their calls in entry order (one
        numpy conversion per array: a row at a time cost ~1 µs an entry)."""
        calls: list[tuple[int, tuple[int, ...]]] = []
        placed = [self._calls(table, e.call, calls) for e in entries]  # (first, count, group)
        n_keys = len(table.key)
        match = np.zeros((len(entries), n_keys, 3), dtype=np.uint64)
        if entries and n_keys:
            match[:] = np.array(
                [
                    [match_row(kf.match_type, kf.width, want)
                     for kf, want in zip(table.key, e.key, strict=True)]
                    for e in entries
                ],
                dtype=np.uint64,
            )  # fmt: skip
        columns = np.array(placed, dtype=np.int64).reshape(-1, 3).T
        count, group = np.ascontiguousarray(columns[1]), np.ascontiguousarray(columns[2])
        return match, count, group, *self._call_arrays(calls)

    def _call_arrays(self, calls: list[tuple[int, tuple[int, ...]]]) -> tuple[np.ndarray, ...]:
        """(action ids, action data padded to the stride) of `calls`."""
        stride = self.data_stride
        padded = [values + (0,) * (stride - len(values)) for _, values in calls]
        return (
            np.array([a for a, _ in calls], dtype=np.int64),
            np.array(padded, dtype=np.uint64).reshape(-1, stride),
        )

    def _publish(self, i: int) -> None:
        """Table i's mirror and default as one ect_table, swapped in under the data plane's
        lock; the old arrays are freed only once no lookup can be reading them."""
        table, mirror = self.program.tables[self._tables[i]], self._mirrors[i]
        assert mirror is not None
        default: list[tuple[int, tuple[int, ...]]] = []
        _, d_count, _ = self._calls(table, table.default, default)
        default_action, default_data = self._call_arrays(default)
        stride, n = self.data_stride, len(mirror.keys)
        first = np.cumsum(mirror.count) - mirror.count
        action = np.concatenate([mirror.action, default_action])
        data = np.concatenate([mirror.data, default_data])
        # the C code reads n entries and their calls; an empty array still needs an address
        arrays = {
            name: np.ascontiguousarray(a if len(a) else np.zeros((1, *a.shape[1:]), a.dtype))
            for name, a in (("match", mirror.match), ("first", first), ("count", mirror.count),
                            ("group", mirror.group), ("action", action), ("data", data))
        }  # fmt: skip
        struct = NativeTable(
            n_entries=n, n_keys=len(table.key), data_stride=stride,
            default_first=len(mirror.action), default_count=d_count,
            **{k: v.ctypes.data for k, v in arrays.items()},
        )  # fmt: skip
        old = self._entries[i]
        self.lib.ect_lock()  # no lookup runs while the table is swapped (native_loop.c)
        try:
            self._slots[i] = ctypes.addressof(struct)
            self._entries[i] = (struct, arrays)
        finally:
            self.lib.ect_unlock()
        del old  # freed only now that no lookup can be reading it

    @staticmethod
    def _calls(
        table: Table, call: ActionCall, calls: list[tuple[int, tuple[int, ...]]]
    ) -> tuple[int, int, int]:
        """Append what `call` may run to `calls`; (first, count, is_group) as tables.resolve."""
        first = len(calls)
        if call.member is None and call.group is None:
            if call.action_id < 0:
                return first, 0, 0
            calls.append((call.action_id, call.data))
            return first, 1, 0
        profile = table.profile
        assert profile is not None
        if call.member is not None:
            action, data, _ = profile.members[call.member]
            calls.append((action, data))
            return first, 1, 0
        for m in profile.groups.get(call.group, []):
            action, data, _ = profile.members[m]
            calls.append((action, data))
        return first, len(calls) - first, 1

    # -- running packets (the data plane, and tests) ----------------------------------------

    def fields(self, values: list[int]) -> np.ndarray:
        return np.array(values, dtype=np.uint64)

    def parse(self, f: np.ndarray, pkt: NativePkt) -> None:
        self.lib.ect_parse(f.ctypes.data, ctypes.byref(pkt))

    def ingress(self, f: np.ndarray, pkt: NativePkt) -> None:
        self.lib.ect_ingress(f.ctypes.data, ctypes.byref(pkt))

    def egress(self, f: np.ndarray, pkt: NativePkt) -> None:
        self.lib.ect_egress(f.ctypes.data, ctypes.byref(pkt))

    def deparse(self, f: np.ndarray, pkt: NativePkt, headroom: int = 256) -> bytes:
        out = ctypes.create_string_buffer(pkt.len + headroom)
        n = self.lib.ect_deparse(f.ctypes.data, ctypes.byref(pkt), out, len(out))
        if n < 0:
            raise ValueError(f"deparsed headers exceed {headroom} bytes of headroom")
        return out.raw[:n]

    def seed(self, seed: int) -> None:
        """Seed modify_field_rng_uniform's generator (tests compare it with a Python twin)."""
        self.lib.ect_seed(seed)


def packet(frame: bytes) -> NativePkt:
    """A NativePkt over a copy of `frame` (kept alive by the NativePkt)."""
    buf = ctypes.create_string_buffer(frame, len(frame))
    pkt = NativePkt(data=ctypes.addressof(buf), len=len(frame), length=len(frame))
    pkt.buffer = buf
    return pkt


def first_match_order(table: Table) -> Callable[[Entry], tuple[int, ...]]:
    """A sort key under which the first entry that matches is the one Table.lookup returns:
    priority order for ternary/range/optional, longest prefix first for LPM (two entries of
    one prefix length cannot both match), insertion order for exact keys. Ties go to the
    older entry, so every entry has its own key."""
    if table.needs_priority:
        return scan_order
    lpm = next((k for k, kf in enumerate(table.key) if kf.match_type == "lpm"), None)
    if lpm is not None:
        return lambda e: (-e.key[lpm][1], e.seq)
    return lambda e: (e.seq,)


@dataclass
class Batch:
    """What NativeProgram.batched() holds back: tables whose mirrors changed (swapped in at
    its end) and tables rebuilt from every entry at its end instead."""

    changed: set[int] = field(default_factory=set)
    rebuild: set[int] = field(default_factory=set)
    changes: Counter[int] = field(default_factory=Counter)

    # A splice costs ~45 µs, a rebuild ~2.5 µs an entry (2-core VM, 2026-11-28): past
    # 8 + n/16 changes to a table of n entries one rebuild at the end is the cheaper.
    def crowded(self, i: int, mirror: TableArrays) -> bool:
        """Count one more change to table i; whether it is to be rebuilt at the end."""
        self.changes[i] += 1
        return i in self.rebuild or self.changes[i] > 8 + len(mirror.keys) // 16


# One table's or one entry's arrays, as TableArrays holds them: match, count, group, action, data
EntryArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class TableArrays:
    """A table's entries as the C lookup reads them (native_runtime.h's ect_table, less the
    default action, which NativeProgram._publish appends), kept between changes so that an
    entry in or out costs a few array copies instead of a rebuild. Every change makes new
    arrays: the ones a lookup may be reading are never written."""

    order: Callable[[Entry], tuple[int, ...]]  # first_match_order
    keys: list[tuple[int, ...]]  # each entry's order key, ascending: first-match order
    match: np.ndarray  # (entries, key fields, 3) uint64: lo, hi, mask
    count: np.ndarray  # (entries,) int64: the calls each entry may run ...
    group: np.ndarray  # (entries,) int64: ... 1 where they are a group's members
    action: np.ndarray  # (calls,) int64: every entry's calls, in entry order
    data: np.ndarray  # (calls, stride) uint64: their action data

    def insert(self, entry: Entry, arrays: EntryArrays) -> None:
        """Add one entry (`arrays`: its own, from NativeProgram._entry_arrays)."""
        key = self.order(entry)
        i = bisect.bisect_left(self.keys, key)
        self._splice(i, i, arrays)
        self.keys.insert(i, key)

    def remove(self, entry: Entry) -> None:
        key = self.order(entry)
        i = bisect.bisect_left(self.keys, key)
        if i == len(self.keys) or self.keys[i] != key:
            raise KeyError(f"entry {entry.key} is not in the native mirror")
        empty = (self.match[:0], self.count[:0], self.group[:0], self.action[:0], self.data[:0])
        self._splice(i, i + 1, empty)
        del self.keys[i]

    def _splice(self, i: int, j: int, new: EntryArrays) -> None:
        """Entries i..j-1 (and their calls) replaced by `new`'s."""
        c, d = int(self.count[:i].sum()), int(self.count[:j].sum())
        match, count, group, action, data = new
        self.match = np.concatenate([self.match[:i], match, self.match[j:]])
        self.count = np.concatenate([self.count[:i], count, self.count[j:]])
        self.group = np.concatenate([self.group[:i], group, self.group[j:]])
        self.action = np.concatenate([self.action[:c], action, self.action[d:]])
        self.data = np.concatenate([self.data[:c], data, self.data[d:]])


def match_row(match_type: str, width: int, want: object) -> tuple[int, int, int]:
    """(lo, hi, mask) for one key field of one entry (native_runtime.h's ect_match)."""
    if match_type in ("exact", "valid"):
        return want, want, ALL_ONES  # type: ignore[return-value]
    if match_type == "lpm":
        value, plen = want  # type: ignore[misc]
        return value, value, ((1 << width) - 1) ^ ((1 << (width - plen)) - 1)
    if match_type in ("ternary", "optional"):
        value, mask = want  # type: ignore[misc]
        return value, value, mask
    low, high = want  # type: ignore[misc]
    return low, high, ALL_ONES
