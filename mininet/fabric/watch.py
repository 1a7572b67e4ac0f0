"""What every switch's threshold registers hold, read over its control port while a phase
runs (issue 20 part 4).

The controller logs the thresholds it sees in digests; once it is gone nobody reads a
digest, so an in-switch policy's decisions after that are seen only in the registers
themselves. `ThresholdWatch` reads them (simple_switch_CLI's `register_read`, which both
targets answer; BMv2's P4Runtime server has no register reads) every `period_s` into
switch_thresholds.jsonl, one row per switch port: {"t", "switch", "port", "kmin", "kmax",
"pmax_bp"}, and an {"t", "event"} row for what happened to the controller.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from ecntune.fabric.net import Fabric
from ecntune.p4src import encoding as enc

log = logging.getLogger(__name__)

REGISTERS = {"kmin": enc.REGISTER_KMIN, "kmax": enc.REGISTER_KMAX, "pmax_bp": enc.REGISTER_PMAX}
_VALUES = re.compile(r"(\w+)\s*=\s*([\d,\s]+)")


def parse_register_reads(out: str) -> dict[str, list[int]]:
    """`register_read NAME` replies (`NAME= 1, 2, ...`, BMv2's after a `RuntimeCmd:` prompt)
    as name -> every index's value."""
    return {m[1]: [int(v) for v in m[2].replace(",", " ").split()] for m in _VALUES.finditer(out)}


class ThresholdWatch:
    """Reads every switch's threshold registers in a background thread until stopped."""

    def __init__(self, fabric: Fabric, path: Path, period_s: float = 0.5) -> None:
        self.fabric, self.path, self.period_s = fabric, path, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="threshold-watch", daemon=True)
        self._lock = threading.Lock()
        self._out = open(path, "w")  # noqa: SIM115 (closed by stop())

    def start(self) -> ThresholdWatch:
        self._thread.start()
        return self

    def event(self, what: str) -> None:
        self._write([{"t": time.time(), "event": what}])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with self._lock:
            self._out.close()

    def _write(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            if not self._out.closed:
                self._out.write("".join(json.dumps(r) + "\n" for r in rows))
                self._out.flush()

    def _run(self) -> None:
        topo = self.fabric.topology
        while not self._stop.wait(self.period_s):
            for name, spec in self.fabric.specs.items():
                try:
                    out = self.fabric.switch(name).target.control(
                        spec, *(f"register_read {r}" for r in REGISTERS.values())
                    )
                except (RuntimeError, OSError) as e:  # a switch restarting: try next time
                    log.debug("%s: register read failed: %s", name, e)
                    continue
                now, values = time.time(), parse_register_reads(out)
                if not all(r in values for r in REGISTERS.values()):
                    continue
                rows = []
                for _, port in topo.ports(name):
                    held = {k: values[r][port] for k, r in REGISTERS.items()}
                    rows.append({"t": now, "switch": name, "port": port, **held})
                self._write(rows)
