"""Does a packet-level simulator agree with ecntune.sim on how mice FCT depends on the ECN
threshold? ns-3.37 (sim/ns3/leafspine.cc, DCTCP hosts) and the simulator run the same
sampled flows of testbed24 WebSearch 60 % + 16:1 incasts under each static setting; mice
are the flows under 100 KB that finished within the window in both, under every setting.

    python sweep.py [WINDOW_S] [SEEDS]      # default 0.01 0,1,2,3 (training seeds)

Writes sweep.json (one row per seed and setting) and prints the mean over seeds. About
4 minutes per seed on 2 cores (ns-3 runs two settings at a time)."""

from __future__ import annotations

import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np

from ecntune.agent.evaluate import run_policies
from ecntune.agent.policy import load_policy
from ecntune.sim import ns3_reference
from ecntune.sim.scenario import SimScenario
from ecntune.traffic.fct import ideal_fct, slowdown

HERE = Path(__file__).resolve().parent
SETTINGS = ["0.25a,0.25a,1", "1a,1a,1", "2a,2a,1", "4a,4a,1", "8a,8a,1", "16a,16a,1",
            "32a,32a,1", "secn1", "secn2", "1a,8a,0.1"]  # fmt: skip
BUFFER_BYTES = 2e6


def one_seed(exe: Path, scenario: SimScenario, window_s: float, seed: int) -> list[dict]:
    env = scenario.env()
    params = env.reset(jax.random.key(seed))[1].params
    flows = ns3_reference.leafspine_flows(env, params, window_s)
    n = len(flows)
    size, rtt = np.asarray(params.size)[:n], np.asarray(params.base_rtt)[:n]
    ideal = ideal_fct(size, np.asarray(params.line_rate)[:n] * 8, rtt)
    topology = env.fabric.topology
    with ThreadPoolExecutor(2) as pool:
        ns3 = dict(zip(SETTINGS, pool.map(lambda s: ns3_reference.run_leafspine(
            exe, flows, topology, window_s, s, BUFFER_BYTES), SETTINGS), strict=True))  # fmt: skip
    policies = {s: load_policy(f"static:{s}") for s in SETTINGS}
    sim = run_policies(scenario, policies, 1, seed=seed, drain_factor=0.0)
    slow = {}
    for s in SETTINGS:
        # ns-3's FCT starts at the SYN, the sim's at the first byte (tests/test_ns3.py)
        fct = np.array(ns3[s]["fct_s"])
        ns3_slow = np.where(fct > 0, slowdown(np.where(fct > 0, fct - rtt, 1.0), ideal), np.nan)
        sim_fct = sim[s].fct_s[0][:n]
        sim_done = (sim_fct > 0) & (np.asarray(params.start)[:n] + sim_fct <= window_s)
        slow[s] = (ns3_slow, np.where(sim_done, sim[s].slowdown[0][:n], np.nan))
    common = np.all([np.isfinite(a) & np.isfinite(b) for a, b in slow.values()], axis=0)
    mice, elephants = common & (size < 100_000), common & (size > 1_000_000)
    rows = []
    for s, per_source in slow.items():
        row = {"seed": seed, "setting": s, "flows": n, "mice": int(mice.sum()),
               "elephants": int(elephants.sum()), "ns3_marked_packets": ns3[s]["marked_packets"],
               "ns3_dropped_packets": ns3[s]["dropped_packets"]}  # fmt: skip
        for source, x in zip(("ns3", "sim"), per_source, strict=True):
            row[f"{source}_mice_mean"] = float(np.mean(x[mice]))
            row[f"{source}_mice_p99"] = float(np.percentile(x[mice], 99))
            row[f"{source}_elephant_mean"] = float(np.mean(x[elephants]))
        rows.append(row)
    return rows


def main() -> None:
    window_s = float(sys.argv[1]) if len(sys.argv) > 1 else 0.01
    seeds = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "0,1,2,3").split(",")]
    reason = ns3_reference.missing()
    if reason:
        raise SystemExit(reason)
    exe = ns3_reference.build(Path(tempfile.mkdtemp()), "leafspine")
    scenario = SimScenario("testbed24", workload="websearch", load=0.6, incast_degree=16,
                           episode_s=window_s)  # fmt: skip
    rows = []
    for seed in seeds:
        rows += one_seed(exe, scenario, window_s, seed)
        print(f"seed {seed} done", flush=True)
    (HERE / "sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("setting         mice mean ns-3 / sim   mice p99 ns-3 / sim   elephants ns-3 / sim")
    for s in SETTINGS:
        mean = {k: np.mean([r[k] for r in rows if r["setting"] == s]) for k in rows[0]
                if k.startswith(("ns3_", "sim_"))}  # fmt: skip
        print(
            f"{s:>14}  {mean['ns3_mice_mean']:6.2f} / {mean['sim_mice_mean']:5.2f}"
            f"      {mean['ns3_mice_p99']:6.1f} / {mean['sim_mice_p99']:5.1f}"
            f"         {mean['ns3_elephant_mean']:5.2f} / {mean['sim_elephant_mean']:5.2f}"
        )


if __name__ == "__main__":
    main()
