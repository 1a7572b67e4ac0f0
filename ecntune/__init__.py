"""ecntune: in-network ECN tuning with reinforcement learning on programmable switches.

The code lives in the repository's top-level folders, each one subpackage of this one:

    p4src/       ecntune.p4src       the P4 program, its committed p4c artifacts and manifest
    switch/      ecntune.switch      the embedded P4 target (runs p4c's BMv2 JSON, speaks P4Runtime)
    controller/  ecntune.controller  P4Runtime controller: telemetry in, thresholds out
    agent/       ecntune.agent       features, actions, rewards (shared with sim/), DDQN, IPPO
    sim/         ecntune.sim         JAX fabric simulator for offline training and evaluation
    mininet/     ecntune.fabric      Mininet topologies and switch nodes (mininet/fabric/)
    traffic/     ecntune.traffic     workload and incast generators, FCT measurement

This package itself holds what every part shares: the topology description and the CLI.
"""

__version__ = "0.1.0"
