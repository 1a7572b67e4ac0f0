"""Mininet emulation of ecntune fabrics (imported as `ecntune.fabric`, never as `mininet`)."""
