"""Mininet emulation of ecntune fabrics (imported as `ecntune.fabric`, never as `mininet`).

nodes.py (hosts and switches) → net.py (a Topology running in Mininet) → scenario.py
(traffic on it) → report.py (comparisons and plots); cleanup.py makes sure every run
leaves nothing behind; commands.py and demo.py are the `ecntune fabric` and `ecntune demo`
commands.
"""

import logging

import mininet.log  # noqa: F401  (first, so that its class change happens before ours)

# Mininet makes its own Logger class every new logger's on import: each logger created
# after that (the controller's, JAX's) gets a handler of its own that writes without a
# newline, so every warning printed twice, run into the next line, and JAX refused the
# level it carries. Mininet's own logger is made explicitly and keeps its class.
logging.setLoggerClass(logging.Logger)
