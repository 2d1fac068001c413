"""Integration tests meet real parts: the local Kubernetes control plane built from
upstream sources by `make controlplane` (see tests/controlplane/) and a real
Prometheus server built from the pinned upstream Go module by `make prometheus` (see
tests/prometheus/; the report header and summary name the binary and version used)."""

from collections.abc import Iterator

import pytest
from controlplane.localcluster import LocalCluster
from controlplane.pytest_plugin import control_plane, namespace, real_node_cluster
from k8s_helpers import install_crd
from kubernetes import client
from prometheus.pytest_plugin import (
    prometheus_binary,
    prometheus_factory,
    pytest_report_header,
    pytest_terminal_summary,
)

__all__ = [
    "control_plane",
    "namespace",
    "prometheus_binary",
    "prometheus_factory",
    "pytest_report_header",
    "pytest_terminal_summary",
    "real_node_cluster",
]


@pytest.fixture(scope="module")
def admin(control_plane: LocalCluster) -> Iterator[client.ApiClient]:
    """An admin API client on the control plane with the SpilloverPolicy CRD installed,
    one per test module."""
    api = control_plane.api_client()
    try:
        install_crd(api)
        yield api
    finally:
        api.close()
