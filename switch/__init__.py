"""The embedded P4 target: p4c's BMv2 JSON behind a P4Runtime server, like simple_switch_grpc."""
