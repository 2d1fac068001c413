"""Speed figures for `make bench*`: how fast the harness plans, runs and evaluates."""
