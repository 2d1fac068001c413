"""Drivers run one job of the matrix somewhere (the simulator, a cluster) and return its record."""
