"""Agents and the definitions they share with the simulator: features, actions, rewards."""
