"""A compiled program: what the compiler hands the data plane and the runtime servers.

The functions run packets (switch/dataplane.py); the tables, profiles, externs, learn
lists and value sets are the very objects those functions close over, so P4Runtime and
the ctl CLI change the program's state by editing them, never by recompiling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ecntune.switch.externs import CounterArray, MeterArray, RegisterArray
from ecntune.switch.layout import Layout
from ecntune.switch.runtime import Pkt
from ecntune.switch.tables import ActionProfile, Table


@dataclass
class ActionInfo:
    name: str
    id: int
    params: tuple[tuple[str, int], ...]  # (name, bitwidth)


@dataclass
class LearnList:
    name: str
    id: int
    fields: tuple[tuple[str, int, int], ...]  # (name, slot, width)


@dataclass
class Program:
    """A compiled program: the functions the switch runs and the state the runtime edits."""

    json: dict[str, Any]
    layout: Layout
    actions: dict[int, ActionInfo]
    tables: dict[str, Table]
    profiles: dict[str, ActionProfile]
    registers: dict[str, RegisterArray]
    counters: dict[str, CounterArray]
    direct_counters: dict[str, str]  # counter name -> table name
    meters: dict[str, MeterArray]
    learn_lists: dict[int, LearnList]
    field_lists: dict[int, tuple[int, ...]]  # id -> slots preserved by clone/resubmit
    value_sets: dict[str, list[tuple[int, int]]]
    errors: dict[str, int]
    parse: Callable[[list[int], Pkt], None]
    ingress: Callable[[list[int], Pkt], None]
    egress: Callable[[list[int], Pkt], None]
    deparse: Callable[[list[int], Pkt], bytes]
    source: str = ""
    slots: dict[str, int] = field(default_factory=dict)  # standard_metadata etc. by dotted name

    def action_by_name(self, name: str) -> ActionInfo:
        for a in self.actions.values():
            if a.name == name:
                return a
        raise KeyError(name)
