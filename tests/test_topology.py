"""The shared fabric description: addressing, ECMP next hops, routes and paths."""

import pytest

from ecntune.controller.forwarding import ForwardingPlan, Group, LpmEntry, Member
from ecntune.testbed import host_ip, single_switch_route
from ecntune.topology import CPU_PORT, Topology, dumbbell, leaf_spine, preset, single_switch


def test_single_switch_addresses_and_ports():
    topo = single_switch(4, 10e6)
    assert [h.ip for h in topo.hosts.values()] == [f"10.0.0.{i}" for i in range(1, 5)]
    assert [p for _, p in topo.ports("s1")] == [1, 2, 3, 4]
    assert len({h.mac for h in topo.hosts.values()}) == 4
    route = {r.prefix: r for r in topo.routes("s1")}["10.0.0.3"]
    assert route.prefix_len == 32
    (hop,) = route.next_hops
    assert hop.port == 3
    assert hop.dst_mac == topo.hosts["h3"].mac


def test_leaf_spine_ecmp_spreads_over_every_spine():
    topo = leaf_spine(n_spines=2, n_leaves=4, hosts_per_leaf=2, host_bw_bps=1e9, fabric_bw_bps=4e9)
    routes = {(r.prefix, r.prefix_len): r for r in topo.routes("leaf1")}
    remote = routes[("10.0.1.0", 24)]  # leaf2's hosts
    assert {h.neighbour for h in remote.next_hops} == {"spine1", "spine2"}
    # spines reach each leaf through exactly one port
    spine_routes = topo.routes("spine1")
    assert all(len(r.next_hops) == 1 for r in spine_routes)
    assert len(spine_routes) == 4
    paths = topo.paths("h1", "h3")
    assert len(paths) == 2
    assert all(p[0][0] == "leaf1" and p[-1][0] == "leaf2" and len(p) == 3 for p in paths)


def test_next_hop_macs_are_the_neighbours_port_macs():
    topo = dumbbell(2, 2, 1e9, 1e9)
    (hop,) = topo.next_hops("s1", "h3")
    far, far_port = topo.neighbour("s1", hop.port)
    assert far == "s2"
    assert hop.dst_mac == topo.mac_of("s2", far_port)
    assert hop.src_mac == topo.mac_of("s1", hop.port)


def test_round_trip_and_malformed_description():
    topo = preset("leafspine-2x2")
    again = Topology.from_dict(topo.to_dict())
    assert again.to_dict() == topo.to_dict()
    assert again.routes("leaf1") == topo.routes("leaf1")
    with pytest.raises(ValueError, match="malformed topology"):
        Topology.from_dict({"name": "x", "hosts": [{"name": "h1"}], "switches": [], "links": []})


def test_invalid_constructions_are_refused():
    topo = single_switch(1, 1e9)
    with pytest.raises(ValueError, match="duplicate"):
        topo.add_host("h1", "s1", 1e9)
    with pytest.raises(ValueError, match="unknown topology"):
        preset("nope")
    big = Topology("big")
    big.add_switch("s1")
    for i in range(CPU_PORT - 1):
        big.add_switch(f"x{i}")
        big.add_link("s1", f"x{i}", 1e9)
    with pytest.raises(ValueError, match="no free ports"):
        big.add_host("h", "s1", 1e9)


def test_paper_fabrics_have_the_papers_shape():
    t = preset("fabric288")
    assert len(t.hosts) == 288
    assert len(t.switches) == 18
    assert {lk.bw_bps for lk in t.links if lk.a in t.hosts} == {25e9}
    assert len(preset("testbed24").hosts) == 24


def test_forwarding_plan_writes_each_next_hop_and_ecmp_set_once():
    topo = leaf_spine(n_spines=2, n_leaves=4, hosts_per_leaf=2, host_bw_bps=1e9, fabric_bw_bps=4e9)
    plan = ForwardingPlan()
    objs = [o for r in topo.routes("leaf1") for o in plan.add(r)]
    members = [o for o in objs if isinstance(o, Member)]
    groups = [o for o in objs if isinstance(o, Group)]
    entries = [o for o in objs if isinstance(o, LpmEntry)]
    # two local hosts + two spines; one ECMP set {spine1, spine2} shared by three remote leaves
    assert sorted(m.hop.neighbour for m in members) == ["h1", "h2", "spine1", "spine2"]
    (group,) = groups
    assert len(group.member_ids) == 2
    assert len(entries) == len(topo.routes("leaf1")) == 5
    assert sum(e.group_id == group.group_id for e in entries) == 3
    # everything an object refers to was written before it
    written: set[int | None] = set()
    for o in objs:
        if isinstance(o, Member):
            written.add(o.member_id)
        elif isinstance(o, Group):
            assert set(o.member_ids) <= written
            written.add(o.group_id)
        else:
            assert (o.member_id or o.group_id) in written
    # a restart re-derives exactly the same ids; a route already written needs only its entry
    again = ForwardingPlan()
    assert [o for r in topo.routes("leaf1") for o in again.add(r)] == objs
    assert again.add(topo.routes("leaf1")[-1]) == [entries[-1]]


def test_single_switch_routes_match_the_topologys_own():
    topo = single_switch(4, 10e6)
    ours = {r.prefix: r for r in topo.routes("s1")}
    for port in (1, 4):
        route = single_switch_route(host_ip(port), 32, [port])
        ((hop,), (expected,)) = route.next_hops, ours[host_ip(port)].next_hops
        assert (hop.port, hop.src_mac, hop.dst_mac) == (port, expected.src_mac, expected.dst_mac)
