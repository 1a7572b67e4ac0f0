"""ecntune keeps XLA's compiled code in ~/.cache/ecntune/jax (ecntune/cache.py): a second
run of the same shapes loads it instead of compiling, and gives the same numbers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Compiles a small function after the CLI's setup, with jax imported before or after it.
PROGRAM = """
import logging, sys
logging.basicConfig()  # as the CLI does: jax's debug lines (JAX_DEBUG_LOG_MODULES) to stderr
if sys.argv[1] == "jax-first":
    import jax
from ecntune.cache import use_jax_compilation_cache
use_jax_compilation_cache()
import jax, jax.numpy as jnp
print(float(jax.jit(lambda x: jnp.sum(jnp.sin(x) ** 2))(jnp.arange(7.0))))
"""


def _run(tmp_path: Path, order: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    base |= {
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # cache even this quick compile
        "JAX_DEBUG_LOG_MODULES": "jax._src.compiler",
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, order], env=base, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.mark.parametrize("order", ["jax-first", "cache-first"])
def test_a_second_run_loads_the_compiled_code_and_computes_the_same(tmp_path, order):
    first = _run(tmp_path, order)
    entries = list((tmp_path / "xdg" / "ecntune" / "jax").glob("jit_*"))
    assert entries, first.stderr[-2000:]
    assert "persistent compilation cache miss" in first.stderr.lower()
    assert "Error reading persistent compilation cache" not in first.stderr  # e.g. no filelock
    second = _run(tmp_path, order)
    assert "persistent compilation cache hit" in second.stderr.lower()
    assert second.stdout == first.stdout


def test_a_cache_the_user_chose_is_left_as_it_is(tmp_path):
    _run(tmp_path, "cache-first", JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine"))
    assert list((tmp_path / "mine").glob("jit_*"))
    assert not (tmp_path / "xdg" / "ecntune" / "jax").exists()
