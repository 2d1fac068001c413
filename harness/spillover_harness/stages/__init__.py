"""Whole stages built on the runner and a driver: the simulator stage, the cluster stage
and its memory lane."""
