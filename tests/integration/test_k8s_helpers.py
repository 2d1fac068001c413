"""The integration tests' shared helpers leave nothing on the host (here: the dynamic
client's discovery cache, which the library writes to the host's temp directory)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from k8s_helpers import create_object
from kubernetes import client


def test_create_object_keeps_its_discovery_cache_off_the_hosts_temp_dir(
    admin: client.ApiClient, namespace: str
) -> None:
    host_tmp = Path(tempfile.gettempdir())
    before = set(host_tmp.glob("osrcp-*.json"))
    probe = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "helper-probe", "namespace": namespace},
        "data": {"probe": "1"},
    }
    created = create_object(admin, probe)
    assert created["metadata"]["name"] == "helper-probe"
    left = sorted(str(p) for p in set(host_tmp.glob("osrcp-*.json")) - before)
    assert not left, f"the dynamic client left its discovery cache on the host: {left}"
