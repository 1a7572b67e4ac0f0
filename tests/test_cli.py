"""The installed console script and the packaging rules it depends on."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ECNTUNE = Path(sys.executable).with_name("ecntune")


def test_doctor_reports_every_check_as_json():
    out = subprocess.run([ECNTUNE, "doctor", "--json"], capture_output=True, text=True, check=True)
    checks = {c["name"]: c for c in map(json.loads, out.stdout.splitlines())}
    assert {"python", "root", "mininet", "bmv2", "p4c", "dctcp", "native-dp"} <= set(checks)
    assert checks["python"]["ok"] is True
    assert checks["root"]["ok"] is (os.geteuid() == 0)
    # which data plane the embedded switch runs: C where a compiler is, else Python and why
    assert checks["native-dp"]["ok"] is (shutil.which("cc") is not None), checks["native-dp"]


def test_unknown_subcommand_fails():
    out = subprocess.run([ECNTUNE, "no-such-command"], capture_output=True, text=True)
    assert out.returncode != 0
    assert "invalid choice" in out.stderr


def test_graphcc_refuses_template_options_it_does_not_have(tmp_path, ecntune_cli):
    for option in (["--levels", "6"], ["--zero-level"], ["--pmax", "0.1,1"]):
        code, _, stderr = ecntune_cli("train", "--algo", "graphcc", *option, "--out", str(tmp_path))
        assert code == 2, option
        assert "120 settings" in stderr, option
        assert not any(tmp_path.iterdir())  # refused before anything ran


def test_demo_options_that_contradict_each_other_are_refused(tmp_path, ecntune_cli):
    for change in (["--storm"], ["--load-to", "0.5"], ["--switch-to", "fb_hadoop"]):
        code, _, stderr = ecntune_cli("demo", "--steady", *change, "--out", str(tmp_path / "d"))
        assert code == 2, change
        assert "--steady names no change" in stderr
    code, _, stderr = ecntune_cli("demo", "--load-to", "1.5", "--out", str(tmp_path / "d"))
    assert code == 2
    assert "loads in (0, 1]" in stderr
    code, _, stderr = ecntune_cli("demo", "--queue-depth", "0", "--out", str(tmp_path / "d"))
    assert code == 2
    assert "--queue-depth is a number of packets" in stderr
    # an in-switch phase needs a tree, and a killed controller needs an in-switch phase
    code, _, stderr = ecntune_cli("demo", "--in-switch", "--out", str(tmp_path / "d"))
    assert code == 2
    assert "--in-switch runs tree:PATH policies" in stderr
    code, _, stderr = ecntune_cli("demo", "--kill-controller-at", "5", "--out", str(tmp_path / "d"))
    assert code == 2
    assert "--kill-controller-at needs --in-switch" in stderr
    assert not any(tmp_path.iterdir())  # refused before any fabric was built


def test_mininet_is_the_library_even_from_the_repo_root():
    code = "import mininet, ecntune.fabric; print(mininet.__file__); print(ecntune.fabric.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lib, fabric = out.stdout.split()
    assert not Path(lib).resolve().is_relative_to(ROOT)
    assert Path(fabric).resolve() == ROOT / "mininet" / "fabric" / "__init__.py"


def test_readme_commands_are_the_ones_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make install demo" in readme
    assert "make install test" in readme
    assert "make install test" in ci


def test_switch_takes_simple_switch_grpc_options_as_the_readme_writes_them():
    """`ecntune switch -i 1@veth1 ... --no-p4` (README), no `--` needed: the options reach
    the switch's own parser, which names the missing interface (it exists nowhere here)."""
    cmd = [ECNTUNE, "switch", "-i", "1@ecnt-none0", "--grpc-server-addr", "127.0.0.1:0"]
    out = subprocess.run([*cmd, "--no-p4"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "no interface named 'ecnt-none0'" in out.stderr
    bad = subprocess.run([ECNTUNE, "eval", "--no-such-option"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "unrecognized arguments: --no-such-option" in bad.stderr


def documented_commands() -> list[tuple[str, str]]:
    """Every `ecntune ...` command line in the tracked Markdown (fenced or indented blocks):
    (file, command), continuations joined, comments dropped, a shell loop's variable as each
    of the values of the last `for VAR in ...;` before it. Lines built by command
    substitution are left out."""
    import shlex

    tracked = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    out = []
    for name in tracked:
        loops: dict[str, list[str]] = {}
        for line in (ROOT / name).read_text().replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            for var, values in re.findall(r"\bfor (\w+) in ([^;]+); do", line):
                loops[var] = shlex.split(values)
            if line.startswith(("ecntune ", "sudo ecntune ")) and "$(" not in line:
                variants = [line]
                for var, values in loops.items():
                    word = re.compile(rf"\${var}\b")
                    if word.search(line):
                        variants = [word.sub(v, c) for c in variants for v in values]
                out += [(name, c) for c in dict.fromkeys(variants)]
    return out


def test_every_command_the_docs_show_parses_as_written():
    """README and docs/ commands reach the parser intact: options and choices that exist."""
    import shlex

    from ecntune.cli import build_parser

    commands = documented_commands()
    assert len(commands) >= 15, commands
    assert {"README.md", "docs/results/README.md"} <= {f for f, _ in commands}
    for where, line in commands:
        argv = shlex.split(line.removeprefix("sudo "))[1:]
        parser = build_parser()
        try:
            args, rest = parser.parse_known_args(argv)
        except SystemExit:
            raise AssertionError(f"{where}: `{line}` does not parse") from None
        assert not rest or getattr(args, "takes_rest", False), f"{where}: `{line}`: {rest}"


def test_the_installed_packages_are_the_locked_versions():
    """`make install` pins every dependency by constraints.txt: what CI tested is what runs."""
    from importlib.metadata import PackageNotFoundError, version

    pins = [
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert len(pins) > 30
    assert all(len(p) == 2 for p in pins), "constraints.txt holds exact pins only"
    wrong = []
    for name, pinned in pins:
        try:
            if version(name) != pinned:
                wrong.append(f"{name} {version(name)} (locked {pinned})")
        except PackageNotFoundError:
            pass  # a platform-specific dependency this machine does not need
    assert not wrong, f"not the locked versions (run make install): {wrong}"


def test_the_controller_runs_only_a_switch_keyed_tree_in_the_switch(tmp_path, ecntune_cli):
    from ecntune.agent import distill
    from ecntune.agent.rewards import Reward

    code, _, stderr = ecntune_cli(
        "controller", "--topology", "tiny", "--policy", "static:secn1", "--in-switch"
    )
    assert code == 2
    assert "in_switch needs a tree policy" in stderr
    obs = np.random.default_rng(0).uniform(0, 1, (200, 18)).astype(np.float32)
    tree, _ = distill.fit_tree(obs, (obs[:, 0] > 0.5).astype(np.int32), max_leaves=4)
    path = tmp_path / "agent-features.json"  # keyed on the agent's features, not ecn.p4's
    distill.save(path, distill.TreeConfig(), tree, Reward("acc"), {})
    code, _, stderr = ecntune_cli(
        "controller", "--topology", "tiny", "--policy", f"tree:{path}", "--in-switch"
    )
    assert code == 2
    assert "distill with --in-switch" in stderr


def test_train_records_how_the_simulator_shaped_its_reward(tmp_path, ecntune_cli):
    """--reward mice-slowdown --reward-baseline --reward-scope --switch-cost reach the
    environment and the checkpoint says so (the controller then refuses the agent: a
    simulator-only reward); a baseline that is no setting is refused before anything trains."""
    from ecntune.agent import ddqn
    from ecntune.agent.nets import load_checkpoint

    base = ["train", "--scenario", "tiny", "--episode-s", "0.3", "--episodes", "2", "--envs", "2",
            "--levels", "4", "--pmax", "0.1,1", "--reward", "mice-slowdown"]  # fmt: skip
    code, _, stderr = ecntune_cli(*base, "--reward-baseline", "SECN9", "--out", str(tmp_path / "x"))
    assert code == 2, stderr[-2000:]
    assert "kmin,kmax,pmax" in stderr
    assert not (tmp_path / "x" / "acc.msgpack").exists()
    shaped = ["--reward-baseline", "secn0", "--reward-scope", "switch", "--switch-cost", "0.02",
              "--goodput-weight", "1.5"]  # fmt: skip
    code, _, stderr = ecntune_cli(*base, *shaped, "--out", str(tmp_path / "t"))
    assert code == 0, stderr[-2000:]
    _, _, meta = load_checkpoint(tmp_path / "t" / "acc.msgpack", ddqn.FORMAT, "ACC")
    assert meta["reward"] == {
        "kind": "mice_slowdown",
        "weights": [0.3, 0.7],
        "paired_with": "secn0",
        "scope": "switch",
        "switch_cost": 0.02,
        "goodput_weight": 1.5,
    }


def test_train_takes_a_feature_set_and_a_listed_template_and_the_checkpoint_keeps_them(
    tmp_path, ecntune_cli
):
    """--features incast --action ... --action ... --gae-lambda --grad-clip --ppo-epochs: the
    agent sees the deepest queue and picks only among the listed settings, after loading
    too, and its checkpoint keeps the λ, the clip and the epochs it trained with; a listed
    template beside grid options, a setting that is none, a λ for ACC or outside [0, 1], or
    a clip or epochs for ACC, or zero epochs, is refused before anything trains. The run trains
    on the tail-leaning reward, mice-slowdown-squared, and the checkpoint says so."""
    from ecntune.agent import ippo
    from ecntune.agent.nets import load_checkpoint
    from ecntune.agent.policy import load_policy

    base = ["train", "--algo", "pet", "--scenario", "tiny", "--episode-s", "0.3",
            "--episodes", "2", "--envs", "2", "--features", "incast"]  # fmt: skip
    refused = [
        (["--action", "0a,0a,1", "--action", "8a,2a,1"], "kmin <= kmax"),
        (["--action", "0a,0a,1", "--levels", "4"], "leave out --levels"),
        (["--gae-lambda", "1.5"], "PET's GAE λ"),
        (["--gae-lambda", "0.01", "--algo", "acc"], "PET's GAE λ"),
        (["--grad-clip", "per_network", "--algo", "acc"], "--grad-clip is PET's"),
        (["--ppo-epochs", "8", "--algo", "acc"], "--ppo-epochs is PET's"),
        (["--ppo-epochs", "0"], "--ppo-epochs is PET's"),
    ]
    for wrong, message in refused:
        code, _, stderr = ecntune_cli(*base, *wrong, "--out", str(tmp_path / "x"))
        assert code == 2, stderr[-2000:]
        assert message in stderr
        assert not (tmp_path / "x").exists()
    listed = ["--action", "0a,0a,1", "--action", "8a,32a,1", "--reward", "mice-slowdown-squared",
              "--gae-lambda", "0.01", "--grad-clip", "per_network",
              "--ppo-epochs", "3"]  # fmt: skip
    code, _, stderr = ecntune_cli(*base, *listed, "--out", str(tmp_path / "t"))
    assert code == 0, stderr[-2000:]
    _, _, meta = load_checkpoint(tmp_path / "t" / "pet.msgpack", ippo.FORMAT, "PET")
    assert meta["reward"]["kind"] == "mice_slowdown_squared"
    agent = load_policy(f"pet:{tmp_path / 't' / 'pet.msgpack'}")
    assert agent.config.features == "incast"
    assert agent.config.settings == ("0a,0a,1", "8a,32a,1")
    assert agent.template.n_actions == 2
    assert agent.config.gae_lambda == 0.01
    assert agent.config.grad_clip == "per_network"
    assert agent.config.epochs == 3


def test_interval_applies_to_every_scenario_of_a_mix(tmp_path, ecntune_cli):
    """--interval-s with --mix: each of the mix's scenarios decides that often, its traffic
    unchanged; a non-positive interval is refused before anything runs."""
    import argparse

    from ecntune.agent.cli import _mix
    from ecntune.sim.scenario import MIXES

    mix = MIXES["star8-20ms-cubic-heldout"]
    slower = _mix(argparse.Namespace(interval_s=0.5), "star8-20ms-cubic-heldout")
    assert [sc.interval_s for sc in slower] == [0.5] * len(mix)
    assert [dataclasses.replace(sc, interval_s=None) for sc in slower] == list(mix)
    assert _mix(argparse.Namespace(interval_s=None), "star8-20ms-cubic-heldout") == list(mix)
    for command, mix_name in (
        ("train", "star8-20ms-cubic-train"),
        ("eval", "star8-20ms-cubic-heldout"),
    ):
        out = str(tmp_path / command)
        code, _, stderr = ecntune_cli(command, "--mix", mix_name, "--interval-s", "0", "--out", out)
        assert code == 2, stderr[-2000:]
        assert "interval_s must be positive" in stderr
        assert not (tmp_path / command).exists()
