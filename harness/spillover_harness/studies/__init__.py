"""Studies beyond the three-point validation: the threshold sweep (`sweep`) and the
sensitivity of the simulated decision to the simulator's model (`sensitivity`)."""
