"""`ecntune train`, `eval` and `distill`: the command line of agent/train.py,
agent/evaluate.py and agent/distill.py.

    ecntune train --algo acc --scenario star8 --episodes 200 --levels 6 --pmax 0.1,1.0
    ecntune eval --mix star8-heldout --checkpoint agent/checkpoints/acc-star8.msgpack
    ecntune eval --scenario testbed24 --incast 16 --checkpoint acc.msgpack --episodes 20
    ecntune distill --checkpoint acc.msgpack --mix star8-train --judge-mix star8-heldout

Heavy imports (JAX) happen inside the run functions, so `ecntune --help` stays instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from pathlib import Path
from typing import Any

from ecntune.sim.scenario import HELD_OUT_SEED, MIXES, SimScenario
from ecntune.traffic.spec import TrafficSpec


def _failure(text: str) -> tuple[str, float, float]:
    try:
        link, down, up = text.split(",")
        return link, float(down), float(up)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--fail wants NODE:PORT,DOWN,UP, got {text!r}") from None


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="star8", help="a topology preset (ecntune.topology)")
    p.add_argument("--workload", default="websearch")
    p.add_argument("--load", type=float, default=0.6)
    p.add_argument("--incast", type=int, default=4, help="N:1 incast degree (0: none)")
    p.add_argument("--incast-bytes", type=int, default=TrafficSpec.incast_bytes, help="per sender")
    p.add_argument(
        "--incast-period-s", type=float, default=None,
        help="seconds between incast bursts (default: a tenth of the episode)",
    )  # fmt: skip
    p.add_argument(
        "--incast-from-s", type=float, default=0.0,
        help="the first burst this far into the episode (an incast storm mid-run)",
    )  # fmt: skip
    p.add_argument(
        "--transport", default="dctcp", choices=["dctcp", "dcqcn", "reno_ecn", "cubic_ecn"]
    )
    p.add_argument(
        "--episode-s", type=float, default=None,
        help="simulated seconds per episode (default: 4 emulated fabrics, 0.02 datacenter ones)",
    )  # fmt: skip
    p.add_argument(
        "--link-delay-us", type=float, default=None,
        help="one-way delay of every link, µs (default: the fabric's own: on emulated ones "
        "the preset's delay plus 125 µs in the switch, e.g. 5125 on star8-20ms; 1 µs "
        "datacenter; 10 is the testbed24rtt mixes')",
    )  # fmt: skip
    p.add_argument(
        "--interval-s", type=float, default=None,
        help="decision interval (default: 0.1 s emulated fabrics, ~40 RTTs datacenter ones; "
        "with --mix, of every scenario of the mix)",
    )  # fmt: skip
    p.add_argument("--switch-to", default=None, help="switch to this workload halfway through")
    p.add_argument("--load-to", type=float, default=None, help="step to this load halfway through")
    p.add_argument(
        "--fail", action="append", default=[], type=_failure, metavar="NODE:PORT,DOWN,UP",
        help="a cable down between two fractions of the episode, e.g. leaf1:1,0.3,0.6 (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--reward-weights", type=_weights, default=(0.3, 0.7), metavar="T,D",
        help="reward = T·throughput + D·delay term (papers: 0.3,0.7 WebSearch; 0.7,0.3 DataMining)",
    )  # fmt: skip
    p.add_argument(
        "--rtt-steps", type=int, default=20,
        help="simulator steps per base RTT on the datacenter fabrics: 20 (default) as the "
        "results; 10 runs ~1.8x faster, mice FCTs a few %% apart (sim/README.md)",
    )  # fmt: skip


def _weights(text: str) -> tuple[float, float]:
    try:
        t, d = (float(x) for x in text.split(","))
        return t, d
    except ValueError:
        raise argparse.ArgumentTypeError(f"--reward-weights wants T,D, got {text!r}") from None


def _grid_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--grid", type=_grid, default=None, metavar="K1,K2,P;...",
        help="static settings (';'-separated, e.g. '1a,4a,0.2;2a,2a,1') instead of the "
        "protocol's grid (agent/static.py PROTOCOL_GRID), for a quick look (the report says so)",
    )  # fmt: skip


def _grid(text: str) -> tuple[str, ...]:
    from ecntune.agent.static import StaticPolicy

    settings = tuple(x.strip() for x in text.split(";") if x.strip())
    try:
        for x in settings:
            StaticPolicy(x)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return settings


def _scenario(args: argparse.Namespace) -> SimScenario:
    """The scenario the options describe; a bad one exits 2 with the reason, as argparse does."""
    try:
        return SimScenario(
            topology=args.scenario,
            workload=args.workload,
            load=args.load,
            incast_degree=args.incast,
            incast_bytes=args.incast_bytes,
            incast_period_s=args.incast_period_s,
            incast_from_s=args.incast_from_s,
            transport=args.transport,
            episode_s=args.episode_s,
            interval_s=args.interval_s,
            link_delay_s=args.link_delay_us * 1e-6 if args.link_delay_us is not None else None,
            switch_to=args.switch_to,
            load_to=args.load_to,
            failures=tuple(args.fail),
            reward_weights=args.reward_weights,
            rtt_steps=args.rtt_steps,
        )
    except ValueError as e:  # unknown workload, negative load, ...
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _mix(args: argparse.Namespace, name: str) -> list[SimScenario]:
    """A named mix's scenarios, each deciding every --interval-s where given: the one
    scenario option that applies to a whole mix (how often the agents decide; the traffic
    stays the mix's own)."""
    scenarios = list(MIXES[name])
    if args.interval_s is None:
        return scenarios
    try:
        return [dataclasses.replace(sc, interval_s=args.interval_s) for sc in scenarios]
    except ValueError as e:  # a non-positive interval
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _mix_arg(p: argparse.ArgumentParser, flag: str, kind: str, text: str) -> None:
    """A named mix of sim/scenario.py whose name ends in `kind` (-train or -heldout)."""
    p.add_argument(flag, choices=sorted(m for m in MIXES if m.endswith(kind)), default=None,
                   help=text)  # fmt: skip


def add_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="train an agent offline in the simulator")
    t.add_argument("--algo", choices=["acc", "pet", "graphcc"], default="acc")
    _scenario_args(t)
    _mix_arg(
        t,
        "--mix",
        "-train",
        "train on a named training mix of sim/scenario.py (episode i: scenario i mod n)",
    )
    _mix_arg(t, "--judge-mix", "-heldout", "judge on this mix's scenarios (judge seeds, never "
             "the held-out ones) instead of the training scenario")  # fmt: skip
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--episodes", type=int, default=64, help="rounded up to whole rounds")
    t.add_argument(
        "--envs", type=int, default=8,
        help="episodes simulated side by side per round (agent/loops.py; one jitted call)",
    )  # fmt: skip
    t.add_argument(
        "--pmax",
        default=None,
        help="comma-separated pmax levels of the action template (default: ACC's 21)",
    )
    t.add_argument("--levels", type=int, default=10, help="kmin/kmax = α·2^n, n < levels")
    t.add_argument(
        "--zero-level", action="store_true",
        help="add kmin/kmax = 0 below α (mark as soon as anything waits: SECN0's step on "
        "slow links, which the template cannot reach otherwise; agent/actions.py)",
    )  # fmt: skip
    t.add_argument(
        "--action", dest="actions", action="append", default=None, metavar="SETTING",
        help="ACC/PET: the template's actions one by one, kmin,kmax,pmax in α units (like "
        "0a,0a,1; repeat it), in place of the --levels/--pmax/--zero-level grid",
    )  # fmt: skip
    t.add_argument(
        "--features", choices=("acc", "pet", "incast"), default=None,
        help="ACC/PET: the observation (agent/features.py; default: the algorithm's paper's); "
        "incast is PET's and each interval's deepest queue, what agent/rule.py reads",
    )  # fmt: skip
    t.add_argument(
        "--gamma", type=float, default=None,
        help="discount per interval (default: the algorithm's config, agent/ddqn.py, ippo.py)",
    )  # fmt: skip
    t.add_argument(
        "--gae-lambda", type=float, default=None,
        help="PET: GAE's λ (default 0.95, agent/ippo.py; PET §5.1 sets it to 0.01)",
    )  # fmt: skip
    t.add_argument(
        "--grad-clip", choices=("joint", "per_network"), default=None,
        help="PET: clip the gradient's norm over actor and critic together (default) or each "
        "network by its own, as PET's Algorithm 1 updates them apart (agent/ippo.py)",
    )  # fmt: skip
    t.add_argument(
        "--ppo-epochs", type=int, default=None, metavar="N",
        help="PET: passes over each round's samples (default 4, agent/ippo.py; PET's "
        "Algorithm 1 optimises 'for N epochs' without giving N)",
    )  # fmt: skip
    t.add_argument("--eps-decay", type=float, default=1000.0, help="ACC: ε decay, in intervals")
    t.add_argument(
        "--reward", choices=("paper", "mice-fct", "mice-slowdown", "mice-slowdown-squared"),
        default="paper",
        help="paper: the algorithm's paper's reward (agent/rewards.py); mice-fct: the "
        "simulator's own mice FCTs in place of the queue term; mice-slowdown: minus the "
        "slowdown the port's running mice accrue in the interval; mice-slowdown-squared: "
        "minus the growth of half their squared slowdowns (leans on the slow mice, the "
        "tail). No switch telemetry carries these (such an agent is judged in the "
        "simulator only)",
    )  # fmt: skip
    t.add_argument(
        "--reward-baseline", metavar="SETTING", default=None,
        help="train on the reward minus the same reward of this static setting (a preset or "
        "kmin,kmax,pmax) simulated on the same flows: most of a port's reward is the "
        "traffic it got, which the difference cancels (sim/env.py)",
    )  # fmt: skip
    t.add_argument(
        "--reward-scope", choices=("port", "switch"), default="port",
        help="port: each port its own reward (the papers); switch: every port its switch's "
        "mean reward, so a port is charged for what its setting costs the others (sim/env.py)",
    )  # fmt: skip
    t.add_argument(
        "--switch-cost", type=float, default=0.0, metavar="REWARD",
        help="charge a port this much reward in each interval whose setting differs from its "
        "last, so it changes only when the change pays for itself (agent/rewards.py)",
    )  # fmt: skip
    t.add_argument(
        "--goodput-weight", type=float, default=0.0, metavar="REWARD",
        help="add this times a port's utilisation in each interval to its reward, so an "
        "agent on a mice reward also weighs the goodput it costs (agent/rewards.py)",
    )  # fmt: skip
    t.add_argument("--save-every", type=int, default=10)
    t.add_argument(
        "--judge-episodes", type=int, default=0,
        help="score every saved checkpoint on this many unseen episodes against the single "
        "best static setting (SECN0-2 and the grid) on them",
    )  # fmt: skip
    _grid_args(t)
    t.add_argument("--out", type=Path, default=None, help="default: results/train-<algo>")
    t.set_defaults(func=run_train)
    e = sub.add_parser(
        "eval",
        help="judge agents against SECN0-2 and the best static setting in hindsight",
        description="Every policy on the same held-out episodes of a scenario mix (or one "
        "scenario): paired comparisons with bootstrap 95 % CIs against the single best static "
        "setting of the static grid (agent/static.py PROTOCOL_GRID) and each scenario's best "
        "(agent/evaluate.py).",
    )
    _scenario_args(e)
    e.add_argument(
        "--mix", choices=sorted(MIXES), default=None,
        help="a named scenario mix of sim/scenario.py instead of the scenario options",
    )  # fmt: skip
    e.add_argument(
        "--part", type=_positions, default=None, metavar="I,J,...",
        help="only these scenarios of --mix (1-based, in this order): one machine can run "
        "some, another the rest, into the same --out (the outcomes cached in its runs/ merge); "
        "the report then covers these alone",
    )  # fmt: skip
    e.add_argument(
        "--checkpoint", action="append", default=[], metavar="[NAME=]PATH",
        help="an agent checkpoint (repeatable); pet*.msgpack is PET, graphcc*.msgpack GraphCC, "
        "*.json a distilled tree (ecntune distill), anything else ACC; shown as KIND:NAME "
        "(default: the file's stem, or its folder's name where stems repeat)",
    )  # fmt: skip
    e.add_argument(
        "--policy", action="append", default=[], metavar="SPEC",
        help="a policy judged like the agents (repeatable), e.g. a hand-written rule "
        "rule:senders>=4:1a,32a,0.2:0a,0a,1 (agent/rule.py) or a PET agent drawing from its "
        "policy, pet-sampled:CHECKPOINT; NAME=SPEC shows it as KIND:NAME",
    )  # fmt: skip
    e.add_argument("--episodes", type=int, default=20, help="per scenario (the protocol: >= 20)")
    e.add_argument("--seed", type=int, default=HELD_OUT_SEED, help="first episode's seed")
    e.add_argument(
        "--drain", type=float, default=1.0,
        help="after the arrival window run on up to this many episode lengths until every "
        "started flow finished (unfinished ones are counted per policy)",
    )  # fmt: skip
    _grid_args(e)
    e.add_argument(
        "--extend-grid", action="append", default=None, metavar="NAME",
        help="with --grid, also run this extension of the protocol's grid (agent/static.py "
        "GRID_EXTENSIONS: below-alpha, low-pmax), cached apart so the grid's outcomes serve "
        "(repeatable; without --grid both always run)",
    )  # fmt: skip
    e.add_argument("--out", type=Path, default=Path("results/eval"))
    e.set_defaults(func=run_eval)
    d = sub.add_parser(
        "distill",
        help="distill a trained agent into a decision tree a switch table can hold",
        description="Sample the agent's greedy decisions on busy ports over a training mix "
        "(or one scenario), fit classification trees on its quantised features for table "
        "sizes up to --max-leaves, report agreement on further episodes, save the largest as "
        "tree.json (one range-match entry per leaf), and with --judge-mix judge tree and "
        "agent by the evaluation protocol (agent/distill.py; RL-CC §V).",
    )
    d.add_argument("--checkpoint", required=True, metavar="PATH",
                   help="the teacher: pet*.msgpack is PET, anything else ACC")  # fmt: skip
    _scenario_args(d)
    _mix_arg(d, "--mix", "-train", "sample states on this training mix (default: the scenario "
             "options)")  # fmt: skip
    d.add_argument(
        "--episodes", type=int, default=32,
        help="episodes per scenario to learn from (as many more to test agreement)",
    )  # fmt: skip
    d.add_argument(
        "--max-leaves", type=int, default=64,
        help="table entries (<= 256: what a port's table holds)",
    )  # fmt: skip
    d.add_argument("--max-depth", type=int, default=None, help="bound the tree's depth too")
    d.add_argument(
        "--in-switch", action="store_true",
        help="key the tree on what ecn.p4 computes itself (the last interval's six values in "
        "log steps) instead of the agent's features, so the P4 program can run it "
        "(ecntune controller --in-switch)",
    )  # fmt: skip
    _mix_arg(d, "--judge-mix", "-heldout", "then run the evaluation protocol on this held-out "
             "mix: tree vs agent vs the single best static, with CIs")  # fmt: skip
    d.add_argument("--judge-episodes", type=int, default=20)
    d.add_argument("--judge-seed", type=int, default=HELD_OUT_SEED,
                   help="the judge's first episode's seed")  # fmt: skip
    d.add_argument("--out", type=Path, default=Path("results/distill"))
    d.set_defaults(func=run_distill)
    s = sub.add_parser(
        "eval-table",
        help="several `ecntune eval` folders (e.g. a mix's parts) in one table",
        description="Per folder: the single best static its report judged against, each agent "
        "family's range over seeds on mice mean slowdown against it, the verdicts other than "
        "'does NOT beat', and how far each family is from its frozen self (agent/summary.py). "
        "Reads report.md, comparisons.csv and policies.csv only; reruns nothing.",
    )
    s.add_argument("folders", type=Path, nargs="+", metavar="DIR")
    s.add_argument("--csv", type=Path, default=None, help="also write one row per agent here")
    s.add_argument(
        "--pool", action="append", default=[], metavar="AGENT",
        help="also pool AGENT (as the folders name it, e.g. acc:g01l4; repeatable) over every "
        "folder it ran in, each against that folder's single best static: a random-effects "
        "estimate with a 95 %% interval per metric (agent/summary.py pool)",
    )  # fmt: skip
    s.add_argument("--pool-csv", type=Path, default=None, help="write the pooled rows here")
    s.add_argument("--forest", type=Path, default=None, metavar="PNG",
                   help="draw every folder's differences and the pooled ones here")  # fmt: skip
    s.set_defaults(func=run_eval_table)
    k = sub.add_parser(
        "pick-seed",
        help="which training seed of an arm to deploy, judged on one `ecntune eval` folder",
        description="Per arm, the seed whose worse relative difference against the folder's "
        "single best static (mice mean or mice p99) is lowest (agent/summary.py). Judge on "
        "episodes that are not the held-out ones (e.g. the training mix's), or the held-out "
        "mix is no longer held out. Reads report.md and comparisons.csv; reruns nothing.",
    )
    k.add_argument("folder", type=Path, metavar="DIR")
    k.add_argument(
        "--arm", action="append", required=True, metavar="NAME",
        help="an arm as the folder names its agents, without the seed: acc:q9 for acc:q90, "
        "acc:q91, ... (repeatable)",
    )  # fmt: skip
    k.set_defaults(func=run_pick_seed)


def run_train(args: argparse.Namespace) -> int:
    from ecntune.agent.evaluate import Judge
    from ecntune.agent.train import first_beat, train

    out = args.out or Path("results") / f"train-{args.algo}"
    if args.gae_lambda is not None and (args.algo != "pet" or not 0.0 <= args.gae_lambda <= 1.0):
        print("error: --gae-lambda is PET's GAE λ, a number in [0, 1]", file=sys.stderr)
        return 2
    if args.grad_clip is not None and args.algo != "pet":
        print("error: --grad-clip is PET's (ACC's DQN has one network)", file=sys.stderr)
        return 2
    if args.ppo_epochs is not None and (args.algo != "pet" or args.ppo_epochs < 1):
        print("error: --ppo-epochs is PET's PPO passes per round, a whole number >= 1",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.algo == "acc":
        from ecntune.agent.ddqn import DdqnConfig

        config: Any = DdqnConfig(eps_decay=args.eps_decay, levels=args.levels,
                                 zero_level=args.zero_level)  # fmt: skip
    elif args.algo == "pet":
        from ecntune.agent.ippo import IppoConfig

        config = IppoConfig(levels=args.levels, zero_level=args.zero_level)
        if args.gae_lambda is not None:
            config = dataclasses.replace(config, gae_lambda=args.gae_lambda)
        if args.grad_clip is not None:
            config = dataclasses.replace(config, grad_clip=args.grad_clip)
        if args.ppo_epochs is not None:
            config = dataclasses.replace(config, epochs=args.ppo_epochs)
    else:
        from ecntune.agent.graphcc import GraphccConfig

        if args.pmax or args.levels != 10 or args.zero_level or args.actions or args.features:
            print("error: GraphCC's actions are its paper's 120 settings (§4.1) and its "
                  "features its own: --levels, --zero-level, --pmax, --action and --features "
                  "do not apply", file=sys.stderr)  # fmt: skip
            return 2
        config = GraphccConfig(eps_decay=args.eps_decay)
    if args.gamma is not None:
        config = dataclasses.replace(config, gamma=args.gamma)
    if args.features:
        config = dataclasses.replace(config, features=args.features)
    if args.actions:
        if args.pmax or args.levels != 10 or args.zero_level:
            print("error: --action lists the template's actions: leave out --levels, "
                  "--pmax and --zero-level", file=sys.stderr)  # fmt: skip
            return 2
        config = dataclasses.replace(config, settings=tuple(args.actions))
    if args.pmax:
        config = dataclasses.replace(config, pmax=tuple(float(p) for p in args.pmax.split(",")))
    scenario = _mix(args, args.mix) if args.mix else _scenario(args)
    judged = _mix(args, args.judge_mix) if args.judge_mix else scenario
    try:
        judge = (
            Judge(judged, args.judge_episodes, grid=args.grid) if args.judge_episodes > 0 else None
        )
        reward_kind = None if args.reward == "paper" else args.reward.replace("-", "_")
        start = time.monotonic()
        path = train(args.algo, scenario, args.episodes, out, args.seed, config,
                     args.save_every, judge=judge, envs=args.envs,
                     reward_kind=reward_kind, reward_baseline=args.reward_baseline,
                     reward_scope=args.reward_scope, switch_cost=args.switch_cost,
                     goodput_weight=args.goodput_weight)  # fmt: skip
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"checkpoint: {path} ({time.monotonic() - start:.0f} s)")
    print(f"learning curve: {out / 'learning_curve.png'}")
    if judge is not None:
        beat = first_beat(out)
        print(
            f"first beat {beat['best_static']} at episode {beat['episode']}, "
            f"{float(beat['wall_s']):.0f} s of training"
            if beat
            else "did not beat the best static setting on the judged episodes"
        )
    return 0


def _kind(path: Path) -> str:
    """The policy kind a file holds, from its name: *.json a distilled tree, pet* PET,
    graphcc* GraphCC, anything else ACC."""
    if path.suffix == ".json":
        return "tree"
    return next((k for k in ("pet", "graphcc") if path.stem.startswith(k)), "acc")


def _checkpoints(specs: list[str]) -> dict[str, Path]:
    """'[NAME=]PATH' -> {'acc:NAME': PATH}: the kind from the file's name (pet*: PET), the
    name given, else the stem, else (where stems repeat, as results/train-*/acc.msgpack do)
    the folder's name; ValueError on a name given twice."""
    paths = [Path(s.partition("=")[2] or s) for s in specs]
    stems = [p.stem for p in paths]
    out: dict[str, Path] = {}
    for spec, path in zip(specs, paths, strict=True):
        given = spec.partition("=")[0] if "=" in spec else None
        kind = _kind(path)
        name = f"{kind}:{given or (path.stem if stems.count(path.stem) == 1 else path.parent.name)}"
        if name in out:
            raise ValueError(f"two checkpoints would both be called {name!r}: name them NAME=PATH")
        out[name] = path
    return out


def _positions(text: str) -> list[int]:
    """'5,4,6' -> [5, 4, 6]: 1-based positions, each at least 1."""
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers like 1,3,4") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: positions start at 1")
    return out


def _named_policy(given: str) -> tuple[str, str]:
    """'NAME=KIND:ARG' -> ('KIND:NAME', 'KIND:ARG'), as --checkpoint names its agents (e.g.
    q9l4=pet-sampled:path -> pet-sampled:q9l4); a bare spec is its own name. A rule's own
    '>=' is not a name: a name comes before the first ':'."""
    name, sep, spec = given.partition("=")
    if not sep or not re.fullmatch(r"[\w.-]+", name):
        return given, given
    return f"{spec.partition(':')[0]}:{name}", spec


def run_eval(args: argparse.Namespace) -> int:
    from ecntune.agent import report
    from ecntune.agent.evaluate import BASELINE_PRESETS, evaluate_mix
    from ecntune.agent.policy import load_policy

    if args.extend_grid and not args.grid:
        print("error: --extend-grid extends a --grid (the protocol's grid has them all)",
              file=sys.stderr)  # fmt: skip
        return 2
    agents = {}
    try:
        for name, ck in _checkpoints(args.checkpoint).items():
            agents[name] = load_policy(f"{name.partition(':')[0]}:{ck}")
        for given in args.policy:
            name, spec = _named_policy(given)
            agents[name] = load_policy(spec)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.mix:
        scenarios, title = _mix(args, args.mix), f"Evaluation on the {args.mix} mix"
        if args.interval_s is not None:
            title += f", decisions every {args.interval_s:g} s"
        if args.part:
            if max(args.part) > len(scenarios):
                print(f"error: --part: {args.mix} has {len(scenarios)} scenarios", file=sys.stderr)
                return 2
            scenarios = [scenarios[i - 1] for i in args.part]
            title += f" (scenarios {', '.join(map(str, args.part))} of {len(MIXES[args.mix])})"
    elif args.part:
        print("error: --part selects scenarios of a --mix", file=sys.stderr)
        return 2
    else:
        scenarios = [_scenario(args)]
        title = f"Evaluation on {scenarios[0].label}"
    if args.episodes < 20:
        print(f"note: {args.episodes} episodes per scenario; the protocol asks for >= 20")
    try:
        result = evaluate_mix(
            scenarios, agents, args.episodes, args.seed, args.drain, args.grid,
            cache=args.out / "runs", extensions=args.extend_grid,
        )  # fmt: skip
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.grid:
        from ecntune.agent.static import PROTOCOL_GRID

        n_grid = len(result.statics) - len(BASELINE_PRESETS)
        extended = f": --grid's and {', '.join(args.extend_grid)}" if args.extend_grid else ""
        title += (
            f" (a reduced grid of {n_grid} static settings{extended}, "
            f"not the protocol's {len(PROTOCOL_GRID)})"
        )
    print(report.write(result, args.out, title))
    plots = ", *.png" if agents else " (no agents: no plots)"
    print(f"written: {args.out}/report.md, comparisons.csv, policies.csv{plots}")
    return 0


def run_pick_seed(args: argparse.Namespace) -> int:
    from ecntune.agent import summary

    try:
        judged = summary.read(args.folder)
        picks = [(arm, *summary.pick_seed(judged, arm)) for arm in args.arm]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"against `{judged.single_best}`, the worse of mice mean and mice p99 per seed:")
    header = ["arm", "seeds (worse of the two)", "chosen"]
    rows = [
        [arm, ", ".join(f"{a} {summary.signed(w)} %" for a, w in worse.items()), chosen]
        for arm, chosen, worse in picks
    ]
    print(summary.markdown(header, rows), end="")
    return 0


def run_eval_table(args: argparse.Namespace) -> int:
    from ecntune.agent import summary

    if (args.pool_csv or args.forest) and not args.pool:
        print("error: --pool-csv and --forest draw what --pool AGENT pools", file=sys.stderr)
        return 2
    try:
        judged = [summary.read(folder) for folder in args.folders]
        pools = summary.pooled(judged, args.pool)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary.markdown(*summary.table(judged)), end="")
    if args.csv:
        summary.write_csv(args.csv, judged)
        print(f"written: {args.csv}")
    if pools:
        print(summary.pooled_markdown(pools), end="")
    if args.pool_csv:
        summary.write_pooled_csv(args.pool_csv, pools)
        print(f"written: {args.pool_csv}")
    if args.forest:
        summary.forest(args.forest, judged, pools)
        print(f"written: {args.forest}")
    return 0


def run_distill(args: argparse.Namespace) -> int:
    from ecntune.agent import distill, report
    from ecntune.agent.evaluate import evaluate_mix
    from ecntune.agent.policy import load_policy

    if not 2 <= args.max_leaves <= 256:
        print("error: --max-leaves must be 2..256 (entries of one port's table)", file=sys.stderr)
        return 2
    path = Path(args.checkpoint)
    if _kind(path) not in ("acc", "pet"):
        print(f"error: {path} is a {_kind(path)} checkpoint: distill an ACC or PET one "
              "(a port's table cannot hear its neighbours' messages)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        teacher = load_policy(f"{_kind(path)}:{path}")
        scenarios = _mix(args, args.mix) if args.mix else [_scenario(args)]
        start = time.monotonic()
        result = distill.distill(teacher, scenarios, args.episodes, args.max_leaves,
                                 args.max_depth, progress=print,
                                 features="switch" if args.in_switch else None)  # fmt: skip
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    meta = {
        "teacher": str(path), "sampled_on": [sc.label for sc in scenarios],
        "episodes": args.episodes, "train_states": result.train_states,
        "test_states": result.test_states, "test_agreement": result.test_agreement,
    }  # fmt: skip
    tree_path = args.out / "tree.json"
    p = result.policy
    distill.save(tree_path, p.config, p.tree, p.reward, meta)
    distill.write_curve(result.curve, args.out)
    print(
        f"tree: {tree_path} ({int(p.tree.action.shape[0])} entries; agrees with the agent on "
        f"{result.test_agreement:.1%} of {result.test_states} held-out states; "
        f"{time.monotonic() - start:.0f} s)"
    )
    if args.judge_mix:
        agents = {f"{_kind(path)}:{path.stem}": teacher, "tree:distilled": distill.load(tree_path)}
        judged = evaluate_mix(_mix(args, args.judge_mix), agents, args.judge_episodes,
                              args.judge_seed, cache=args.out / "runs")  # fmt: skip
        report.write(judged, args.out / "eval", f"Distilled tree and its agent on {args.judge_mix}")
        print(distill.write_judgement(judged, *agents, result, args.out))
    return 0
