"""Integration tests meet a real Kubernetes API server: the local control plane
built from upstream sources by `make controlplane` (see tests/controlplane/)."""

from controlplane.pytest_plugin import control_plane, namespace

__all__ = ["control_plane", "namespace"]
