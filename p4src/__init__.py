"""The P4 program (ecn.p4), its committed p4c artifacts in build/, and their manifest."""
