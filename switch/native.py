"""The native backend's loader: compile a Program's C once, load it, keep its state in sync.

switch/compile_c.py turns a compiled Program into C; this module builds that with the C
compiler Debian's build-essential provides (`cc`), caches the shared object by the hash
of its source (a program loads in milliseconds the second time), and loads it with
ctypes. The Program's Python objects stay the control plane's view: P4Runtime and the
ctl CLI keep editing `Table`s and `ActionProfile`s, which tell this module (`on_change`)
to rebuild that table's entry arrays for the C lookup; registers and counters move into
arrays the C code writes in place and P4Runtime reads without stopping anything.

A Program runs either natively or in Python, never both: attaching a NativeProgram
moves its registers' and counters' cells into arrays (the same objects, so whoever holds
them reads the live values), which its Python functions are not written for. Where no
compiler exists or the program uses what the C path refuses, `NativeUnavailable` says
why and the switch keeps the Python path.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ecntune.cache import cache_root
from ecntune.switch.compile_c import CCompiler
from ecntune.switch.layout import Unsupported
from ecntune.switch.program import Program
from ecntune.switch.tables import ActionCall, ActionProfile, Table

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
        self._slots = (ctypes.c_void_p * max(len(cc.tables), 1)).in_dll(self.lib, "ect_tab")
        for i, name in enumerate(cc.tables):
            table = program.tables[name]
            table.on_change = lambda i=i: self.sync_table(i)
            self.sync_table(i)
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

    def sync_profile(self, profile: ActionProfile) -> None:
        for i, name in enumerate(self._tables):
            if self.program.tables[name].profile is profile:
                self.sync_table(i)

    def sync_table(self, i: int) -> None:
        """Rebuild table i's arrays in the order Table.lookup finds entries, then swap them in."""
        table = self.program.tables[self._tables[i]]
        entries = ordered_entries(table)
        calls: list[tuple[int, tuple[int, ...]]] = []
        placed = [self._calls(table, e.call, calls) for e in entries]  # (first, count, group)
        d_first, d_count, _ = self._calls(table, table.default, calls)
        n_keys, stride = len(table.key), self.data_stride
        # one numpy conversion per array (a row at a time cost ~1 µs an entry: issue 21)
        rows = [
            [
                match_row(kf.match_type, kf.width, want)
                for kf, want in zip(table.key, e.key, strict=True)
            ]
            for e in entries
        ]
        match = np.zeros((max(len(entries), 1), max(n_keys, 1), 3), dtype=np.uint64)
        if entries and n_keys:
            match[:] = np.array(rows, dtype=np.uint64)
        padded = [values + (0,) * (stride - len(values)) for _, values in calls]
        columns = np.array(placed or [(0, 0, 0)], dtype=np.int64).T
        arrays = {
            "match": match,
            "first": np.ascontiguousarray(columns[0]),
            "count": np.ascontiguousarray(columns[1]),
            "group": np.ascontiguousarray(columns[2]),
            "action": np.array([a for a, _ in calls] or [0], dtype=np.int64),
            "data": np.array(padded or [(0,) * stride], dtype=np.uint64).reshape(-1, stride),
        }
        struct = NativeTable(
            n_entries=len(entries), n_keys=n_keys, data_stride=self.data_stride,
            default_first=d_first, default_count=d_count,
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


def ordered_entries(table: Table) -> list:
    """Entries in an order where the first match is the one Table.lookup returns: priority
    order for ternary/range/optional, longest prefix first for LPM (two entries of one
    prefix length cannot both match), any order for exact keys."""
    entries = list(table.entries.values())
    if table.needs_priority:
        return sorted(entries, key=lambda e: (-e.priority, e.seq))
    lpm = next((k for k, kf in enumerate(table.key) if kf.match_type == "lpm"), None)
    if lpm is not None:
        return sorted(entries, key=lambda e: -e.key[lpm][1])
    return entries


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
