"""The P4Runtime controller: telemetry digests in, ECN thresholds out, one agent per switch."""
