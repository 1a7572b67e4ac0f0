"""`make test` runs the root tests beside the others (Makefile): both must pass for the target
to pass, and Ctrl-C must reach the root run in the background, which a shell would otherwise
leave running (with its fabrics) after the foreground run stopped.

The recipe runs here as written, by make and bash, with a stand-in for the interpreter
(`PY=`): a script that behaves like one pytest run (started, then passes, fails or is
interrupted) and records which, so the orchestration is what is tested, in seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

STAND_IN = """\
import os, sys, time
from pathlib import Path

args = sys.argv[1:]
if args[:2] == ["-m", "ruff"]:
    sys.exit(0)
suite = "root" if args[-1] == "root" else "rest"
state = Path(os.environ["STATE_DIR"]) / suite
state.write_text("started")
try:
    time.sleep(float(os.environ.get(f"{suite.upper()}_S", "0")))
except KeyboardInterrupt:
    state.write_text("interrupted")
    sys.exit(2)
state.write_text("finished")
print(f"{suite} suite's output")
sys.exit(int(os.environ.get(f"{suite.upper()}_RC", "0")))
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make_test(tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    """`make test` in the repository with the stand-in as the interpreter, in a process group
    of its own with Ctrl-C's default action (a test runner may have started us ignoring it)."""
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!{sys.executable}\n{STAND_IN}")
    stand_in.chmod(0o755)
    (tmp_path / "state").mkdir()
    return subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(REPO), "test", f"PY={stand_in}",
         f"ROOT_TEST_LOG={tmp_path / 'root.log'}"],
        env={**os.environ, "STATE_DIR": str(tmp_path / "state"), **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def states(tmp_path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (tmp_path / "state").iterdir()}


def test_both_runs_pass_and_the_root_runs_log_is_printed(tmp_path: Path) -> None:
    out, _ = make_test(tmp_path).communicate(timeout=60)
    assert states(tmp_path) == {"root": "finished", "rest": "finished"}
    assert "pytest exit codes: not root 0, root 0" in out
    assert out.index("=== root tests") < out.index("root suite's output")


@pytest.mark.parametrize("failing", ["ROOT", "REST"])
def test_either_run_failing_fails_the_target(tmp_path: Path, failing: str) -> None:
    proc = make_test(tmp_path, **{f"{failing}_RC": "1"})
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert states(tmp_path) == {"root": "finished", "rest": "finished"}
    codes = {"ROOT": "not root 0, root 1", "REST": "not root 1, root 0"}[failing]
    assert f"pytest exit codes: {codes}" in out


def test_ctrl_c_interrupts_the_root_run_in_the_background_too(tmp_path: Path) -> None:
    """Both runs would sleep 2 minutes; Ctrl-C (SIGINT to make's process group, as a
    terminal sends it) must interrupt both, and make must fail."""
    proc = make_test(tmp_path, ROOT_S="120", REST_S="120")
    try:
        deadline = time.monotonic() + 60
        while len(states(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert states(tmp_path) == {"root": "started", "rest": "started"}
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make still waits a minute after Ctrl-C: {states(tmp_path)}")
        assert states(tmp_path) == {"root": "interrupted", "rest": "interrupted"}, out
        assert proc.returncode != 0
    finally:
        # after a failure, nothing of make's group sleeps on (a root run in a group of its
        # own ends when its 2 minutes do)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
