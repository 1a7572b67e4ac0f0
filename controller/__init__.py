"""The P4Runtime controller: telemetry digests in, ECN thresholds out, one agent per switch.

config.py      the configuration file and its validation
forwarding.py  routes -> members, ECMP groups, LPM entries (finsy or our own client)
loop.py        the control loop of one switch (telemetry -> policy -> thresholds)
fabric_policy.py  one model for the whole fabric (GraphCC), each switch's loop its slice
safety.py      telemetry checks, clamping, the fallback state machine
app.py         finsy switches, write paths, the background runner the demo uses
cli.py         `ecntune controller --config FILE`
"""


def control_plane(*args, **kwargs):  # type: ignore[no-untyped-def]
    """ecntune.controller.app.control_plane, imported on first use (finsy and JAX are heavy)."""
    from ecntune.controller.app import control_plane as run

    return run(*args, **kwargs)
