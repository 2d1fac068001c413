"""pytest fixtures for the local Kubernetes control plane.

Use from a conftest.py::

    from controlplane.pytest_plugin import control_plane, namespace  # noqa: F401

or as a plugin: ``pytest_plugins = ["controlplane.pytest_plugin"]``.

- ``control_plane`` (session): a started :class:`LocalCluster`; one per test session.
- ``namespace`` (function): a fresh namespace for the test, deleted afterwards.

Binaries that are not built are a failure (never a skip): the message names what is
missing and the fix, ``make controlplane``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.localcluster import (
    HOW_TO_BUILD,
    ControlPlaneError,
    LocalCluster,
    find_bin_dir,
    missing_binaries,
)


def _bin_dir() -> Path:
    try:
        bin_dir = find_bin_dir()
    except ControlPlaneError as exc:
        pytest.fail(f"local control plane unavailable: {exc}", pytrace=False)
    missing = missing_binaries(bin_dir)
    if missing:
        pytest.fail(
            f"local control plane not built: {', '.join(missing)} missing in {bin_dir}; "
            f"{HOW_TO_BUILD}",
            pytrace=False,
        )
    return bin_dir


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The local control plane (etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler, kwok with one fake node), started once per session."""
    bin_dir = _bin_dir()
    workdir = tmp_path_factory.mktemp("controlplane")
    nodes = int(os.environ.get("SPILLOVER_CONTROLPLANE_NODES", "1"))
    yield from _running(LocalCluster(workdir, bin_dir, nodes=nodes), "local control plane")


@pytest.fixture(scope="module")
def real_node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane with a real node (kubelet, containerd, runc) beside kwok's,
    one per test module (one real node per host at a time: realnode.py). Needs root and
    `make host-deps`; a missing part fails, naming the command that brings it."""
    from controlplane.realnode import HOW_TO_INSTALL, missing_host_parts

    bin_dir = _bin_dir()
    missing = missing_host_parts()
    if missing:
        pytest.fail(
            f"the real node needs Debian packages this host lacks: {', '.join(missing)}; "
            f"{HOW_TO_INSTALL}",
            pytrace=False,
        )
    if os.geteuid() != 0:
        pytest.fail(
            "the real node needs root (CI runs as root): run the tests as root", pytrace=False
        )
    cluster = LocalCluster(tmp_path_factory.mktemp("realnode"), bin_dir, real_node=True)
    yield from _running(cluster, "the local cluster with a real node")


def _running(cluster: LocalCluster, what: str) -> Iterator[LocalCluster]:
    """Start `cluster` (a failure names `what`), yield it, stop it."""
    try:
        cluster.start()
    except ControlPlaneError as exc:
        pytest.fail(f"{what} failed to start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def namespace(control_plane: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted (without waiting) afterwards."""
    name = control_plane.create_namespace(request.node.name)
    try:
        yield name
    finally:
        control_plane.delete_namespace(name)
