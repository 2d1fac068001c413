"""A real Prometheus server for the tests, built from the pinned upstream Go module
(build.sh, `make prometheus`; see README.md)."""
