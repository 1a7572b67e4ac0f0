"""Figures for reports: matplotlib without a display, imported only when a figure is drawn.

Every report (eval, train, distill, the demo, benchmarks) writes PNGs on machines that have
no display (CI, SSH sessions, network namespaces), so the backend is Agg; and matplotlib is
imported inside `pyplot()` rather than at module level, so commands that draw nothing (the
controller, the switch) do not pay for importing it (0.9-1.1 s on a busy 2-core machine).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, dpi: int = 120, **layout: Any) -> None:
    """Lay out, write and close: an open figure per report would keep its memory until
    the process ends (matplotlib holds every figure pyplot made)."""
    fig.tight_layout(**layout)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
