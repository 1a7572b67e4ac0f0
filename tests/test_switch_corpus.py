"""The program corpus (tests/p4_corpus.py): header stacks with `.last` and run-time
indices, header unions, union stacks, varbit fields (issue 18).

Every case's expected frames are computed in the corpus from P4's semantics, never read
back from a switch. In memory, each program runs on the embedded target the way
tests/test_switch_golden.py runs ecn.p4 (no root needed). On veths, the same cases run on
each installed target started with the program as `simple_switch prog.json` would be:
the embedded target everywhere as root, BMv2 where simple_switch_grpc is installed (the
reference; cases where simple_switch aborts on an out-of-bounds index are left out there).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ecntune.switch.compiler import compile_program
from ecntune.switch.dataplane import MAX_PASSES, Switch
from ecntune.switch.layout import Unsupported
from ecntune.targets import TARGETS
from ecntune.testbed import Testbed
from tests.p4_corpus import CASES, PROGRAMS, Case
from tests.wires import Wire

PORTS = (1, 2, 3, 4)
EXPECT_TIMEOUT_S = 10.0  # for the frames a case expects, on a loaded machine


def run_in_memory(doc: dict, case: Case) -> list[tuple[int, bytes]]:
    switch = Switch({})
    wires = {n: Wire(n) for n in PORTS}
    switch.ports = wires  # in place of raw sockets: Switch only calls send() (and close())
    switch.load(compile_program(doc))
    try:
        switch.receive(case.port, case.frame)
        for _ in range(MAX_PASSES):  # a recirculated packet queues again
            switch.run_departures(time.monotonic() + 3600)
            if not any(q.items for q in switch.tm.queues.values()):
                break
    finally:
        switch.stop()
    return [(n, frame) for n, w in wires.items() for frame in w.sent]


def show(frames: list[tuple[int, bytes]] | tuple[tuple[int, bytes], ...]) -> str:
    return "\n".join(f"  port {p}: {f.hex()}" for p, f in frames) or "  (nothing)"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_program_compiles_and_every_case_sends_what_p4_says(name: str) -> None:
    doc = PROGRAMS[name]()
    wrong = []
    for case in CASES[name]():
        got = run_in_memory(doc, case)
        if got != list(case.out):
            wrong.append(f"{case.what}:\n expected\n{show(case.out)}\n got\n{show(got)}")
    assert not wrong, "\n".join(wrong)


def test_the_corpus_covers_what_issue_18_names() -> None:
    """Each construct appears in some program's JSON (so a refactor of the corpus cannot
    quietly drop one; ecn.p4, the golden and PTF tests cover the rest of issue 4's list:
    LPM with action selectors, registers, counters, digests, clones, checksums)."""
    text = json.dumps([PROGRAMS[n]() for n in sorted(PROGRAMS)])
    for construct in (
        '"stack_field"',
        '"union_stack_field"',
        '"dereference_header_stack"',
        '"dereference_union_stack"',
        '"last_stack_index"',
        '"extract_VL"',
        '"*"',
        '"header_union_stacks": [{',
        '"valid_union"',
        '"op": "?"',
        '"op": "pop"',
        '"union_stack"',
        '"usat_cast"',
        '"sat_cast"',
        '"two_comp_mod"',
        '"b2d"',
        '"d2b"',
        '"match_type": "range"',
        '"match_type": "ternary"',
        '"match_type": "lpm"',
        '"prefix_length"',
        '"runtime_data"',
        '"crc16"',
        '"crc32"',
        '"crcCCITT"',
        '"csum16"',
        '"xor16"',
        '"identity"',
        '"op": "recirculate"',
        '"op": "resubmit"',
        '"op": "truncate"',
        '"lookahead"',
    ):
        assert construct in text, construct


def test_a_runtime_index_past_the_stack_drops_the_packet_and_says_why(caplog) -> None:
    doc = PROGRAMS["vlan_stack"]()
    case = next(c for c in CASES["vlan_stack"]() if not c.bmv2)
    assert run_in_memory(doc, case) == []
    assert "header stack index 9 outside [0, 3)" in caplog.text


def test_what_is_still_refused_is_refused_by_name() -> None:
    doc = PROGRAMS["ipv4_options"]()
    ops = [op for s in doc["parsers"][0]["parse_states"] for op in s["parser_ops"]]
    extract_vl = next(op for op in ops if op["op"] == "extract_VL")
    extract_vl["op"] = "extract"  # a varbit header without its length
    extract_vl["parameters"].pop()
    with pytest.raises(Unsupported, match="extract of a header with a varbit field"):
        compile_program(doc)


def test_duplicate_node_ids_are_refused_not_looped_on() -> None:
    """Two conditionals with one id once compiled to one function calling itself."""
    doc = PROGRAMS["union_rewrite"]()
    conditionals = doc["pipelines"][0]["conditionals"]
    conditionals[1]["id"] = conditionals[0]["id"]
    with pytest.raises(Unsupported, match="duplicate conditional id"):
        compile_program(doc)


def installed_targets() -> list:
    return [
        pytest.param(
            name,
            marks=pytest.mark.skipif(
                not t.available(), reason=f"{t.switch_cmd[0]} is not installed (README: BMv2)"
            ),
        )
        for name, t in TARGETS.items()
    ]


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.parametrize("target_name", installed_targets())
def test_the_corpus_on_veths_on_each_target(target_name: str, tmp_path: Path) -> None:
    wrong = []
    for name in sorted(PROGRAMS):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(PROGRAMS[name]()))
        with Testbed(target_name, len(PORTS), "cp", program=path) as tb:
            for case in CASES[name]():
                if target_name == "bmv2" and not case.bmv2:
                    continue
                tb.send(case.port, case.frame)
                got = []  # what the case expects (however slow the switch), then any extra
                deadline = time.monotonic() + EXPECT_TIMEOUT_S
                while len(got) < len(case.out) and time.monotonic() < deadline:
                    got += tb.collect(quiet_s=0.1)
                got += tb.collect(quiet_s=0.3)
                if sorted(got) != sorted(case.out):
                    expected = show(case.out)
                    wrong.append(f"{name}, {case.what}:\n expected\n{expected}\n got\n{show(got)}")
    assert not wrong, "\n".join(wrong)
