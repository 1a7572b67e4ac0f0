"""Markers that need something this machine may lack skip with the reason printed (-rs)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

NEEDS = {
    "root": (lambda: os.geteuid() == 0, "needs root for network namespaces and raw sockets"),
    "bmv2": (
        lambda: shutil.which("simple_switch_grpc") is not None,
        "BMv2 simple_switch_grpc is not on PATH (see README: docker/ or p4lang packages)",
    ),
    "p4c": (lambda: shutil.which("p4c") is not None, "p4c is not on PATH (see README)"),
}


# XLA's LLVM backend at -O0: the suite's simulations are small, so compiling them is most of
# their time; on 2 cores this cut the slowest tests 13-26 % (an eval-and-train test 126 ->
# 93 s, the ten-steps-per-RTT and ns-3 agreement tests 164 -> 144 s) with the same results.
# Tests only: the commands keep XLA's default, where long evaluations' run time dominates.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"


def pytest_configure(config: pytest.Config) -> None:
    """Set before jax starts, so subprocesses (the CLI, Mininet hosts) inherit both: the
    fast-compiling XLA flag, and a JAX compilation cache of this run's own (the CLI would
    otherwise fill the user's ~/.cache/ecntune/jax), empty at its start and deleted at its
    end, so no run reuses another's compiles."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {TEST_XLA_FLAGS}".strip()
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    path = tempfile.mkdtemp(prefix="ecntune-test-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = path
    config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, (available, reason) in NEEDS.items():
            if item.get_closest_marker(marker) and not available():
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True, scope="module")
def _compiled_code_released_after_each_module():
    """XLA's CPU code takes thousands of memory maps per compiled simulation; one pytest
    process that kept every module's passed Linux's 65,530 per process (vm.max_map_count)
    and crashed inside XLA (a segfault compiling in test_sim, 60 % into the suite)."""
    yield
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()


@pytest.fixture
def ecntune_cli(capsys: pytest.CaptureFixture[str]):
    """Run `ecntune ARGS...` in this process: (exit code, stdout, stderr). Cheaper than a
    subprocess (no second interpreter, JAX start-up or recompiles of what other tests have
    compiled); the console script's own wiring is tested in test_cli.py."""
    from ecntune.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse's refusals
            code = e.code if isinstance(e.code, int) else 2
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
