"""The manifest tests need no cluster; the monitoring rules' tests need promtool, built
from the pinned Prometheus module by `make prometheus` (tests/prometheus/README.md)."""

from prometheus.pytest_plugin import promtool_binary

__all__ = ["promtool_binary"]
