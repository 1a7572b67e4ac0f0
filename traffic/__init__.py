"""Traffic for the emulated fabric: workloads from flow-size CDFs, incasts, FCT records."""
