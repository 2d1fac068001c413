"""A real Prometheus server for the tests (Debian's package; see install.sh)."""
