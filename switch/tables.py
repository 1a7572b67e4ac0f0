"""Match-action tables and action profiles (members, groups, selectors) of the embedded target.

Lookup picks the cheapest structure the key allows: a dict for exact keys, one dict per
prefix length for a single LPM field (longest first), and a priority-ordered scan for
ternary, range and optional keys. Entries are identified as P4Runtime identifies them:
by their match and, where the table needs one, their priority (higher wins).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ecntune.switch.hashes import ALGORITHMS, pack_bits
from ecntune.switch.layout import Unsupported

# One field of a normalised match: exact -> int; lpm -> (value, prefix_len);
# ternary/optional -> (value, mask); range -> (low, high); valid -> 0/1.
MatchValue = Any


class EntryError(Exception):
    """A runtime request the table cannot honour; `code` is the gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class KeyField:
    name: str
    match_type: str  # exact | lpm | ternary | range | optional | valid
    width: int


@dataclass
class ActionCall:
    """What an entry does: an action with data, or (indirect tables) a member or group."""

    action_id: int = -1
    data: tuple[int, ...] = ()
    member: int | None = None
    group: int | None = None


@dataclass
class Entry:
    key: tuple[MatchValue, ...]
    priority: int
    call: ActionCall
    seq: int
    packets: int = 0
    bytes: int = 0
    meter: Any = None
    controller_metadata: int = 0

    def count(self, length: int) -> None:
        self.packets += 1
        self.bytes += length


# What a Table tells its on_change: an entry inserted, modified (its call) or deleted, the
# default action set, or "all" (anything may have changed: read the whole table again).
TableChange = Literal["insert", "modify", "delete", "default", "all"]


def scan_order(e: Entry) -> tuple[int, int]:
    """First-match order of a table that needs priorities: the highest priority first, the
    oldest entry first among equals."""
    return -e.priority, e.seq


def _mask(width: int) -> int:
    return (1 << width) - 1


def _matches(kf: KeyField, want: MatchValue, got: int) -> bool:
    t = kf.match_type
    if t in ("exact", "valid"):
        return got == want
    if t == "lpm":
        value, plen = want
        m = _mask(kf.width) ^ _mask(kf.width - plen)
        return (got & m) == value
    if t in ("ternary", "optional"):
        value, mask = want
        return (got & mask) == value
    low, high = want
    return low <= got <= high


class ActionProfile:
    """Members (action + data) and groups of members; with a selector, one member per packet."""

    def __init__(
        self,
        name: str,
        id_: int,
        max_size: int,
        algo: str | None,
        widths: Sequence[int],
        max_group_size: int = 0,
    ) -> None:
        if algo is not None and algo not in ALGORITHMS:
            raise Unsupported(f"action selector {name!r} uses hash algorithm {algo!r}")
        self.name, self.id, self.max_size = name, id_, max_size
        self.hash = ALGORITHMS[algo] if algo else None
        self.widths = tuple(widths)
        self.max_group_size = max_group_size
        self.members: dict[int, tuple[int, tuple[int, ...], int]] = {}  # id -> (action, data, seq)
        self.groups: dict[int, list[int]] = {}
        self._seq = itertools.count()
        # the native path's mirror: told after a change that can alter what an existing entry
        # runs (a new member or group is named by no entry yet, so adding one tells nobody)
        self.on_change: Callable[[], None] | None = None

    @property
    def has_selector(self) -> bool:
        return self.hash is not None

    def add_member(self, member: int, action_id: int, data: tuple[int, ...]) -> None:
        if member in self.members:
            raise EntryError("ALREADY_EXISTS", f"member {member} exists in {self.name}")
        if len(self.members) >= self.max_size:
            raise EntryError("RESOURCE_EXHAUSTED", f"action profile {self.name} is full")
        self.members[member] = (action_id, data, next(self._seq))

    def modify_member(self, member: int, action_id: int, data: tuple[int, ...]) -> None:
        if member not in self.members:
            raise EntryError("NOT_FOUND", f"no member {member} in {self.name}")
        self.members[member] = (action_id, data, self.members[member][2])
        self._changed()

    def delete_member(self, member: int) -> None:
        if member not in self.members:
            raise EntryError("NOT_FOUND", f"no member {member} in {self.name}")
        if any(member in g for g in self.groups.values()):
            raise EntryError("FAILED_PRECONDITION", f"member {member} is still in a group")
        del self.members[member]
        self._changed()

    def set_group(self, group: int, members: Sequence[int], create: bool) -> None:
        if not self.has_selector:
            raise EntryError("INVALID_ARGUMENT", f"{self.name} has no selector: no groups")
        if create and group in self.groups:
            raise EntryError("ALREADY_EXISTS", f"group {group} exists in {self.name}")
        if not create and group not in self.groups:
            raise EntryError("NOT_FOUND", f"no group {group} in {self.name}")
        unknown = [m for m in members if m not in self.members]
        if unknown:
            raise EntryError("NOT_FOUND", f"group {group} names unknown members {unknown}")
        if self.max_group_size and len(set(members)) > self.max_group_size:
            raise EntryError("RESOURCE_EXHAUSTED", f"group {group} exceeds max_group_size")
        # BMv2 picks the n-th member in handle (creation) order.
        self.groups[group] = sorted(set(members), key=lambda m: self.members[m][2])
        if not create:
            self._changed()

    def delete_group(self, group: int) -> None:
        if self.groups.pop(group, None) is None:
            raise EntryError("NOT_FOUND", f"no group {group} in {self.name}")
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def select(self, group: int, selector_values: Sequence[int]) -> tuple[int, tuple[int, ...]]:
        """The member a packet with these selector field values uses (BMv2: hash % size)."""
        members = self.groups[group]
        if not members:
            raise LookupError(f"group {group} of {self.name} is empty")
        h = self.hash(pack_bits(selector_values, self.widths)) if self.hash else 0
        action, data, _ = self.members[members[h % len(members)]]
        return action, data


@dataclass
class Table:
    name: str
    id: int
    key: tuple[KeyField, ...]
    action_ids: frozenset[int]
    max_size: int
    kind: str  # simple | indirect | indirect_ws
    profile: ActionProfile | None
    with_counters: bool
    default: ActionCall = field(default_factory=ActionCall)
    default_const: bool = False
    const_entries: bool = False
    entries: dict[tuple, Entry] = field(default_factory=dict)
    # the native path's mirror (switch/native.py): told after every change of what lookup
    # sees, with what changed (TableChange), so that one insert costs it one entry, not all
    on_change: Callable[[TableChange, Entry | None], None] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        types = [k.match_type for k in self.key]
        self.needs_priority = any(t in ("ternary", "range", "optional") for t in types)
        self._lpm = types.index("lpm") if not self.needs_priority and "lpm" in types else None
        self._seq = itertools.count()
        self._rebuild()

    # -- lookup (per packet) ----------------------------------------------------------

    def _rebuild(self) -> None:
        """Index every entry anew (at creation, after const entries, after clear)."""
        self._scan: list[Entry] = []
        self._len_dicts: dict[int, dict[tuple, Entry]] = {}
        self._by_len: list[tuple[int, dict[tuple, Entry]]] = []
        self._exact: dict[tuple, Entry] = {}
        for e in self.entries.values():
            self._index(e)

    def _index(self, e: Entry) -> None:
        """Add one entry to the lookup structure: O(log n) or O(1), not a rebuild."""
        if self.needs_priority:
            bisect.insort(self._scan, e, key=scan_order)
        elif self._lpm is not None:
            plen = e.key[self._lpm][1]
            if plen not in self._len_dicts:
                self._len_dicts[plen] = {}
                self._list_lengths()
            self._len_dicts[plen][self._lpm_key(e)] = e
        else:
            self._exact[e.key] = e

    def _unindex(self, e: Entry) -> None:
        if self.needs_priority:
            del self._scan[bisect.bisect_left(self._scan, scan_order(e), key=scan_order)]
        elif self._lpm is not None:
            plen = e.key[self._lpm][1]
            del self._len_dicts[plen][self._lpm_key(e)]
            if not self._len_dicts[plen]:
                del self._len_dicts[plen]
                self._list_lengths()
        else:
            del self._exact[e.key]

    def _lpm_key(self, e: Entry) -> tuple:
        """The key a packet's values make under e's prefix mask (lookup builds the same)."""
        i = self._lpm
        assert i is not None
        return (*e.key[:i], e.key[i][0], *e.key[i + 1 :])

    def _list_lengths(self) -> None:
        """The prefix lengths present, longest first, each with its mask (a new list, so a
        lookup iterating the old one is not disturbed)."""
        assert self._lpm is not None
        w = self.key[self._lpm].width
        self._by_len = [
            (_mask(w) ^ _mask(w - plen), self._len_dicts[plen])
            for plen in sorted(self._len_dicts, reverse=True)
        ]

    def _changed(self, change: TableChange, entry: Entry | None = None) -> None:
        if self.on_change is not None:
            self.on_change(change, entry)

    def lookup(self, values: tuple[int, ...]) -> Entry | None:
        if self.needs_priority:
            for e in self._scan:
                if all(_matches(k, w, g) for k, w, g in zip(self.key, e.key, values, strict=True)):
                    return e
            return None
        if self._lpm is not None:
            i = self._lpm
            for mask, d in self._by_len:
                e = d.get((*values[:i], values[i] & mask, *values[i + 1 :]))
                if e is not None:
                    return e
            return None
        return self._exact.get(values)

    # -- runtime API (P4Runtime, JSON const entries) --------------------------------------

    def normalise(self, key: Sequence[MatchValue], priority: int) -> tuple[tuple, int]:
        """Validate a match against the key format; return it canonicalised."""
        if len(key) != len(self.key):
            raise EntryError("INVALID_ARGUMENT", f"{self.name} needs {len(self.key)} key fields")
        out = []
        for kf, v in zip(self.key, key, strict=True):
            m = _mask(kf.width)
            t = kf.match_type
            if t in ("exact", "valid"):
                if not isinstance(v, int) or not 0 <= v <= m:
                    raise EntryError("INVALID_ARGUMENT", f"{kf.name}: bad exact value {v!r}")
                out.append(v)
            elif t == "lpm":
                value, plen = v
                if not 0 <= plen <= kf.width or not 0 <= value <= m:
                    raise EntryError("INVALID_ARGUMENT", f"{kf.name}: bad prefix {v!r}")
                pm = m ^ _mask(kf.width - plen)
                if value & ~pm:
                    raise EntryError("INVALID_ARGUMENT", f"{kf.name}: bits set past the prefix")
                out.append((value, plen))
            elif t in ("ternary", "optional"):
                value, mask = v
                if not (0 <= value <= m and 0 <= mask <= m) or value & ~mask:
                    raise EntryError("INVALID_ARGUMENT", f"{kf.name}: bad value/mask {v!r}")
                out.append((value, mask))
            else:
                low, high = v
                if not 0 <= low <= high <= m:
                    raise EntryError("INVALID_ARGUMENT", f"{kf.name}: bad range {v!r}")
                out.append((low, high))
        if not self.needs_priority:
            if priority != 0:  # the spec: a priority only where ternary/range/optional match
                raise EntryError("INVALID_ARGUMENT", f"{self.name} entries take no priority")
        elif priority <= 0:
            raise EntryError("INVALID_ARGUMENT", f"{self.name} entries need a priority > 0")
        return tuple(out), priority

    def check_call(self, call: ActionCall) -> None:
        if self.kind == "simple":
            if call.member is not None or call.group is not None:
                raise EntryError("INVALID_ARGUMENT", f"{self.name} takes actions, not members")
            if call.action_id not in self.action_ids:
                raise EntryError("INVALID_ARGUMENT", f"action not allowed in {self.name}")
            return
        assert self.profile is not None
        if call.member is not None and call.member not in self.profile.members:
            raise EntryError("NOT_FOUND", f"no member {call.member} in {self.profile.name}")
        if call.group is not None and call.group not in self.profile.groups:
            raise EntryError("NOT_FOUND", f"no group {call.group} in {self.profile.name}")
        if call.member is None and call.group is None:
            raise EntryError("INVALID_ARGUMENT", f"{self.name} entries name a member or group")

    def insert(self, key: Sequence[MatchValue], priority: int, call: ActionCall) -> Entry:
        if self.const_entries:
            raise EntryError("PERMISSION_DENIED", f"{self.name} has const entries")
        k, p = self.normalise(key, priority)
        if (k, p) in self.entries:
            raise EntryError("ALREADY_EXISTS", f"entry exists in {self.name}")
        if len(self.entries) >= self.max_size:
            raise EntryError("RESOURCE_EXHAUSTED", f"{self.name} is full ({self.max_size})")
        self.check_call(call)
        entry = Entry(k, p, call, next(self._seq))
        self.entries[(k, p)] = entry
        self._index(entry)
        self._changed("insert", entry)
        return entry

    def find(self, key: Sequence[MatchValue], priority: int) -> Entry:
        k, p = self.normalise(key, priority)
        try:
            return self.entries[(k, p)]
        except KeyError:
            raise EntryError("NOT_FOUND", f"no such entry in {self.name}") from None

    def modify(self, key: Sequence[MatchValue], priority: int, call: ActionCall) -> Entry:
        if self.const_entries:
            raise EntryError("PERMISSION_DENIED", f"{self.name} has const entries")
        entry = self.find(key, priority)
        self.check_call(call)
        entry.call = call
        self._changed("modify", entry)
        return entry

    def delete(self, key: Sequence[MatchValue], priority: int) -> Entry:
        """Remove the entry; it is returned (P4Runtime drops its encoding)."""
        if self.const_entries:
            raise EntryError("PERMISSION_DENIED", f"{self.name} has const entries")
        entry = self.find(key, priority)
        del self.entries[(entry.key, entry.priority)]
        self._unindex(entry)
        self._changed("delete", entry)
        return entry

    def set_default(self, call: ActionCall) -> None:
        if self.default_const:
            raise EntryError("PERMISSION_DENIED", f"{self.name}'s default action is const")
        if self.kind != "simple":
            raise EntryError("INVALID_ARGUMENT", f"{self.name} is indirect: no default action")
        self.check_call(call)
        self.default = call
        self._changed("default")

    def clear(self) -> None:
        if not self.const_entries:
            self.entries.clear()
            self._rebuild()
            self._changed("all")


def resolve(
    table: Table, entry: Entry | None, selector: Callable[[], Sequence[int]]
) -> tuple[int, tuple[int, ...]] | None:
    """The (action id, data) a lookup result runs; None when the table has nothing to run."""
    call = entry.call if entry is not None else table.default
    if call.member is None and call.group is None:
        return (call.action_id, call.data) if call.action_id >= 0 else None
    profile = table.profile
    assert profile is not None
    if call.member is not None:
        action, data, _ = profile.members[call.member]
        return action, data
    try:
        return profile.select(call.group, selector())
    except LookupError:
        return None
