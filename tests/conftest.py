"""Markers that need something this machine may lack skip with the reason printed (-rs)."""

from __future__ import annotations

import os
import shutil

import pytest

NEEDS = {
    "root": (lambda: os.geteuid() == 0, "needs root for network namespaces and raw sockets"),
    "bmv2": (
        lambda: shutil.which("simple_switch_grpc") is not None,
        "BMv2 simple_switch_grpc is not on PATH (see README: docker/ or p4lang packages)",
    ),
    "p4c": (lambda: shutil.which("p4c") is not None, "p4c is not on PATH (see README)"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, (available, reason) in NEEDS.items():
            if item.get_closest_marker(marker) and not available():
                item.add_marker(pytest.mark.skip(reason=reason))
