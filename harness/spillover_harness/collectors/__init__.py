"""Collectors read a recorded field from the platform: Prometheus counters, log lines."""
