"""Forwarding state of one switch, from the shared topology description, as finsy entities.

Every route becomes an LPM entry of EcnIngress.ipv4_lpm pointing at an action-selector
member (one next hop) or group (ECMP over several); each member rewrites the MACs for
its next hop. Member and group ids are derived deterministically, so re-installing after
a switch restart produces exactly the same state.
"""

from __future__ import annotations

import ipaddress

import finsy as fy

from ecntune.p4src import encoding as enc
from ecntune.topology import NextHop, Topology, mac_int


def forwarding_entities(topology: Topology, switch: str) -> list:
    """Members, then groups, then table entries (the order a switch accepts them in)."""
    members: dict[NextHop, int] = {}
    groups: dict[tuple[int, ...], int] = {}
    entries = []
    for route in topology.routes(switch):
        ids = []
        for hop in route.next_hops:
            if hop not in members:
                members[hop] = len(members) + 1
            ids.append(members[hop])
        if len(ids) == 1:
            action = fy.P4IndirectAction(member_id=ids[0])
        else:
            key = tuple(sorted(ids))
            if key not in groups:
                groups[key] = 1000 + len(groups)
            action = fy.P4IndirectAction(group_id=groups[key])
        prefix = int(ipaddress.IPv4Address(route.prefix))
        entries.append(
            fy.P4TableEntry(
                enc.TABLE_IPV4,
                match=fy.P4TableMatch({"hdr.ipv4.dst_addr": (prefix, route.prefix_len)}),
                action=action,
            )
        )
    member_entities = [
        fy.P4ActionProfileMember(
            enc.ECMP_SELECTOR,
            member_id=mid,
            action=fy.P4TableAction(
                enc.ACTION_FORWARD,
                port=hop.port,
                src_mac=mac_int(hop.src_mac),
                dst_mac=mac_int(hop.dst_mac),
            ),
        )
        for hop, mid in members.items()
    ]
    group_entities = [
        fy.P4ActionProfileGroup(
            enc.ECMP_SELECTOR,
            group_id=gid,
            members=[fy.P4Member(m, weight=1) for m in key],
        )
        for key, gid in groups.items()
    ]
    return member_entities + group_entities + entries
