"""What to run: the matrix and the simulator parameters it carries."""
