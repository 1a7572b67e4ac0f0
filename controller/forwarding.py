"""Forwarding state of one switch: routes → action-selector members, ECMP groups, LPM entries.

Every route becomes an LPM entry of EcnIngress.ipv4_lpm pointing at an action-selector
member (one next hop) or group (ECMP over several); each member rewrites the MACs for
its next hop. `ForwardingPlan` is the one place that turns routes into those objects: the
controller renders them as finsy entities (`forwarding_entities`), the testbed, the PTF
suite and the benches write them with ecntune's own client (`install`). Ids depend only
on the order routes are added, so re-installing after a switch restart produces exactly
the same state, and a next hop or ECMP set shared by several routes is written once.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import finsy as fy

from ecntune.p4runtime_client import P4RuntimeClient
from ecntune.p4src import encoding as enc
from ecntune.topology import NextHop, Route, Topology, mac_int

FIRST_GROUP_ID = 1000  # members count up from 1; groups from here, so the two never meet


@dataclass(frozen=True)
class Member:
    """forward(port, src_mac, dst_mac) towards one next hop."""

    member_id: int
    hop: NextHop

    @property
    def params(self) -> dict[str, int]:
        return {
            "port": self.hop.port,
            "src_mac": mac_int(self.hop.src_mac),
            "dst_mac": mac_int(self.hop.dst_mac),
        }


@dataclass(frozen=True)
class Group:
    """ECMP over members, equal weights (the selector hashes the 5-tuple)."""

    group_id: int
    member_ids: tuple[int, ...]


@dataclass(frozen=True)
class LpmEntry:
    """prefix/prefix_len → a member or a group (exactly one of the two is set)."""

    prefix: str
    prefix_len: int
    member_id: int | None = None
    group_id: int | None = None

    @property
    def match(self) -> dict[str, tuple[int, int]]:
        return {"hdr.ipv4.dst_addr": (int(ipaddress.IPv4Address(self.prefix)), self.prefix_len)}


ForwardingObject = Member | Group | LpmEntry


class ForwardingPlan:
    """Allocates member and group ids for routes added one at a time."""

    def __init__(self) -> None:
        self.members: dict[NextHop, int] = {}
        self.groups: dict[tuple[int, ...], int] = {}

    def add(self, route: Route) -> list[ForwardingObject]:
        """What this route needs that is not written yet, in an order a switch accepts:
        new members, then a new group, then the entry."""
        new: list[ForwardingObject] = []
        ids = []
        for hop in route.next_hops:
            if hop not in self.members:
                self.members[hop] = len(self.members) + 1
                new.append(Member(self.members[hop], hop))
            ids.append(self.members[hop])
        if len(ids) == 1:
            return [*new, LpmEntry(route.prefix, route.prefix_len, member_id=ids[0])]
        key = tuple(sorted(ids))
        if key not in self.groups:
            self.groups[key] = FIRST_GROUP_ID + len(self.groups)
            new.append(Group(self.groups[key], key))
        return [*new, LpmEntry(route.prefix, route.prefix_len, group_id=self.groups[key])]


def forwarding_entities(topology: Topology, switch: str) -> list:
    """The switch's whole forwarding state as finsy entities: members, then groups, then
    table entries (one write a switch accepts in any order it applies them)."""
    plan = ForwardingPlan()
    objs = [o for route in topology.routes(switch) for o in plan.add(route)]
    rank = {Member: 0, Group: 1, LpmEntry: 2}
    return [_finsy(o) for o in sorted(objs, key=lambda o: rank[type(o)])]


def _finsy(obj: ForwardingObject) -> fy.P4Entity:
    if isinstance(obj, Member):
        action = fy.P4TableAction(enc.ACTION_FORWARD, **obj.params)
        return fy.P4ActionProfileMember(enc.ECMP_SELECTOR, member_id=obj.member_id, action=action)
    if isinstance(obj, Group):
        members = [fy.P4Member(m, weight=1) for m in obj.member_ids]
        return fy.P4ActionProfileGroup(enc.ECMP_SELECTOR, group_id=obj.group_id, members=members)
    ref = {"member_id": obj.member_id} if obj.member_id else {"group_id": obj.group_id}
    return fy.P4TableEntry(
        enc.TABLE_IPV4, match=fy.P4TableMatch(obj.match), action=fy.P4IndirectAction(**ref)
    )


def install(client: P4RuntimeClient, objs: list[ForwardingObject]) -> None:
    """Write `objs` in order with ecntune's own client, one write each."""
    for obj in objs:
        if isinstance(obj, Member):
            msg = client.member(enc.ECMP_SELECTOR, obj.member_id, enc.ACTION_FORWARD, obj.params)
        elif isinstance(obj, Group):
            msg = client.group(enc.ECMP_SELECTOR, obj.group_id, list(obj.member_ids))
        else:
            msg = client.table_entry(
                enc.TABLE_IPV4, obj.match, member=obj.member_id, group=obj.group_id
            )
        client.insert(msg)
