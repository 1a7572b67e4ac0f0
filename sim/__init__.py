"""The JAX fabric simulator used to train agents offline and to evaluate them at scale."""
