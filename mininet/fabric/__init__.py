"""Mininet emulation of ecntune fabrics (imported as `ecntune.fabric`, never as `mininet`).

nodes.py (hosts and switches) → net.py (a Topology running in Mininet) → scenario.py
(traffic on it) → report.py (comparisons and plots); cleanup.py makes sure every run
leaves nothing behind; commands.py and demo.py are the `ecntune fabric` and `ecntune demo`
commands.
"""

import logging

# Mininet installs its own Logger class on import; loggers created after that (JAX's, on
# the controller's first import) carry a level JAX refuses. Create JAX's logger first.
logging.getLogger("jax")
