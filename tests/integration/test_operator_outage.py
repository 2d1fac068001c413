"""The operator through an API outage: the kube-apiserver of a private local control
plane (the session's one is shared) is stopped and started again. While it is down the
operator's liveness endpoint fails; once it is back, a policy change is applied without
restarting the operator, and liveness recovers. No timing is asserted: the figure
(seconds from the API's return to the change applied) is `make bench-operator`'s
`recovery_after_outage_s`."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from controlplane.localcluster import ControlPlaneError, LocalCluster
from controlplane.pytest_plugin import _bin_dir
from k8s_helpers import (
    CRD_FILE,
    condition,
    connection,
    container_manifest,
    deployment_manifest,
    env_map,
    install_crd,
    is_ready,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client
from spillover_operator.client import create_object, patch_policy
from spillover_operator.client.discovery import SPILLOVER_POLICIES
from spillover_operator.domain.model import ENABLED_VAR

pytestmark = pytest.mark.integration

NS = "outage"
WRC = "workflow-recipe-controller"
OUTAGE_S = 20.0  # longer than kopf's 10 s liveness cache, so /healthz sees the outage


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path / "cluster", _bin_dir())
    try:
        cluster.start()
    except ControlPlaneError as exc:
        pytest.fail(f"local control plane failed to start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


def _health(op: OperatorProcess) -> int | None:
    """/healthz's HTTP status, None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.health_port}/healthz", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def test_liveness_fails_during_an_outage_and_changes_apply_after_it(
    private_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = private_cluster
    with cluster.api_client() as api:
        install_crd(api, yaml.safe_load(CRD_FILE.read_text()))
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
        container = container_manifest("wrc", "registry.example/wrc:1.0", {"LOG_LEVEL": "info"})
        client.AppsV1Api(api).create_namespaced_deployment(
            NS, deployment_manifest(WRC, [container])
        )
        conn = connection(api, NS)
        wait_for(
            "the policy to be created",
            lambda: create_object(
                conn,
                SPILLOVER_POLICIES,
                policy_manifest(NS, {"enabled": True, "target": {"deployment": WRC}}),
            ),
            retry_on=(Exception,),
        )
        op = OperatorProcess(NS, cluster.kubeconfig, tmp_path, resync_seconds=300)
        try:
            op.start()
            wait_for("the policy to be Ready", lambda: is_ready(read_policy(api, NS)), operator=op)
            assert _health(op) == 200

            cluster.stop_apiserver()
            try:
                wait_for(
                    "/healthz to fail while the API server is down",
                    lambda: _health(op) == 500,
                    timeout=OUTAGE_S + 60,
                    operator=op,
                )
                time.sleep(max(0.0, OUTAGE_S - 10))  # let kopf's retries back off
            finally:
                cluster.start_apiserver()

            wait_for(
                "the policy PATCH after the outage",
                lambda: patch_policy(conn, "spillover", {"spec": {"enabled": False}}),
                retry_on=(Exception,),
            )
            wait_for(
                "the operator to apply the change after the outage",
                lambda: env_map(read_deployment(api, NS, WRC)).get(ENABLED_VAR) == "false",
                operator=op,
            )
            wait_for(
                "the policy to be Ready again", lambda: is_ready(read_policy(api, NS)), operator=op
            )
            assert condition(read_policy(api, NS), "Ready")["status"] == "True"
            wait_for("/healthz to answer 200 again", lambda: _health(op) == 200, operator=op)
            op.check_alive()
        finally:
            op.stop()
