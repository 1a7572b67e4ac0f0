"""Where ecntune keeps what it can rebuild: compiled data planes and XLA's compiled code.

Each entry is keyed by what it was built from (the C source and compiler flags; the
computation, its shapes, compile options, XLA flags and the jax/XLA version and platform),
so a stale one is never used and deleting the folder costs only the next run's compile
time. The CPU model is not in XLA's key: a home folder shared by machines of different CPUs
wants a JAX_COMPILATION_CACHE_DIR of its own on each.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

JAX_CACHE_MAX_BYTES = 1 << 30  # least recently used entries go beyond this


def cache_root() -> Path:
    """$XDG_CACHE_HOME/ecntune, else ~/.cache/ecntune."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ecntune"


def use_jax_compilation_cache() -> None:
    """Keep XLA's compiled simulator on disk: compiling an evaluation's or a training run's
    scans takes most of a short run (a 2-minute eval-and-train test: 126 s cold, 47 s warm),
    and the second `ecntune eval`/`train`/`demo` of the same shapes then starts in seconds.
    A JAX_COMPILATION_CACHE_DIR the user (or the test suite) set is left as it is."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    path = str(cache_root() / "jax")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = path  # read by jax when it is imported
    max_bytes = os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(JAX_CACHE_MAX_BYTES))
    if "jax" in sys.modules:  # already imported: tell its config directly
        config = sys.modules["jax"].config
        config.update("jax_compilation_cache_dir", path)
        config.update("jax_compilation_cache_max_size", int(max_bytes))
