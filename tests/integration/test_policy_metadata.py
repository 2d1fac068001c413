"""A SpilloverPolicy's metadata does not reach kopf's state, on the local control plane
with the real operator (`kopf run`, the Role of manifests/base): kopf records the last
handled configuration in one annotation of the policy, and all annotations of an object
share the API server's 256 KiB. That record holds the spec alone, so a policy carrying
1800 labels (over 300 KB, which the API server admits: it bounds no label set as a
whole) is handled like any other: `spilloverctl kill --wait` and `restore --wait` come
back done, and no write of kopf's is refused. A policy recorded by an operator that
still copied the metadata has its record rewritten without it, no handler run."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    condition,
    container_manifest,
    current,
    deployment_manifest,
    env_map,
    is_ready,
    model,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client
from spillover_operator.cli.main import run
from spillover_operator.domain.constants import FINALIZER
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"
WRC = "workflow-recipe-controller"
RECORD = f"{GROUP}/last-handled-configuration"
SPEC = {"enabled": True, "target": {"deployment": WRC, "container": "wrc"}}


def many_labels(count: int = 1800) -> dict[str, str]:
    """`count` labels of 187 bytes each (a 60-character prefix, a 63-character name, a
    63-character value): 1800 of them are 336,600 bytes."""
    prefix = "policy-metadata." + "t" * 36 + ".example"  # 60 characters
    assert len(prefix) == 60
    return {f"{prefix}/l{i:04d}-{'n' * 57}": "v" * 63 for i in range(count)}


def record(policy: dict[str, Any]) -> Any:
    """kopf's last-handled-configuration of the policy, decoded (None if absent)."""
    raw = (policy["metadata"].get("annotations") or {}).get(RECORD)
    return None if raw is None else json.loads(raw)


def ctl(kubeconfig: Path, namespace: str, *argv: str) -> tuple[int, str, str]:
    """spilloverctl in-process, exactly as the console script runs it."""
    out, err = io.StringIO(), io.StringIO()
    code = run(["--kubeconfig", str(kubeconfig), "-n", namespace, *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def operator_rbac(control_plane: LocalCluster, namespace: str, admin: client.ApiClient) -> Path:
    """The ServiceAccount, Role and RoleBinding of manifests/base in this namespace; a
    kubeconfig with the ServiceAccount's token."""
    docs = {
        n: yaml.safe_load((BASE / f"{n}.yaml").read_text())
        for n in ("serviceaccount", "role", "rolebinding")
    }
    for doc in docs.values():
        doc["metadata"]["namespace"] = namespace
    docs["rolebinding"]["subjects"][0]["namespace"] = namespace
    client.CoreV1Api(admin).create_namespaced_service_account(
        namespace, model(client.V1ServiceAccount, docs["serviceaccount"])
    )
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(namespace, model(client.V1Role, docs["role"]))
    rbac.create_namespaced_role_binding(namespace, model(client.V1RoleBinding, docs["rolebinding"]))
    return Path(control_plane.service_account_kubeconfig(namespace, "spillover-operator"))


@pytest.fixture
def wrc(namespace: str, admin: client.ApiClient) -> None:
    env = {"LOG_LEVEL": "info", PASSTHROUGH_VAR: "OPENAI_BASE_URL"}
    body = deployment_manifest(WRC, [container_manifest("wrc", "registry.example/wrc:1.0", env)])
    client.AppsV1Api(admin).create_namespaced_deployment(
        namespace, model(client.V1Deployment, body)
    )


@pytest.fixture
def operator(
    namespace: str, operator_rbac: Path, admin: client.ApiClient, tmp_path: Path
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(namespace, operator_rbac, tmp_path, resync_seconds=300)
    try:
        yield op
    finally:
        op.stop()
        # Let the namespace go: drop the finalizer a stopped operator leaves.
        custom = client.CustomObjectsApi(admin)
        for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)[
            "items"
        ]:
            if item["metadata"].get("finalizers"):
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )  # fmt: skip


def create_policy(admin: client.ApiClient, namespace: str, **metadata: Any) -> None:
    body = policy_manifest(namespace, SPEC)
    body["metadata"].update(metadata)
    client.CustomObjectsApi(admin).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body
    )


def wait_ready(admin: client.ApiClient, namespace: str, op: OperatorProcess) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        policy = read_policy(admin, namespace)
        return policy if is_ready(policy) else None

    return wait_for("the policy Ready for its generation", probe, operator=op)


def wait_record(
    admin: client.ApiClient, namespace: str, op: OperatorProcess, enabled: bool
) -> dict[str, Any]:
    """The policy once kopf's record is its spec alone (as stored: with the CRD's
    defaults), with `enabled` (kopf writes it when the change's handler is done)."""
    seen: list[Any] = [None]

    def probe() -> dict[str, Any] | None:
        policy = read_policy(admin, namespace)
        seen[0] = record(policy)
        done = policy["spec"]["enabled"] is enabled and seen[0] == {"spec": policy["spec"]}
        return policy if done else None

    try:
        return wait_for(f"kopf's record of enabled={enabled}, the spec alone", probe, operator=op)
    except pytest.fail.Exception as exc:
        raise AssertionError(f"{exc}\nkopf's record: {json.dumps(seen[0])[:2000]}") from None


@pytest.mark.usefixtures("wrc")
def test_a_policy_with_1800_labels_is_handled_and_a_kill_applies(
    control_plane: LocalCluster, namespace: str, admin: client.ApiClient, operator: OperatorProcess
) -> None:
    labels = many_labels()
    assert sum(len(k) + len(v) for k, v in labels.items()) > 256 * 1024  # over the budget
    operator.start()
    create_policy(admin, namespace, labels=labels)  # admitted: the API bounds no label set
    wait_ready(admin, namespace, operator)
    policy = wait_record(admin, namespace, operator, enabled=True)
    assert policy["metadata"]["labels"] == labels

    code, out, err = ctl(control_plane.kubeconfig, namespace, "kill", "--wait", "--timeout", "120")
    assert code == 0, out + err
    assert env_map(read_deployment(admin, namespace, WRC))[ENABLED_VAR] == "false"
    policy = read_policy(admin, namespace)
    assert current(policy) and condition(policy, "Ready")["status"] == "True"
    wait_record(admin, namespace, operator, enabled=False)

    code, out, err = ctl(
        control_plane.kubeconfig, namespace, "restore", "--wait", "--timeout", "120"
    )
    assert code == 0, out + err
    assert env_map(read_deployment(admin, namespace, WRC))[ENABLED_VAR] == "true"
    policy = wait_record(admin, namespace, operator, enabled=True)
    assert policy["metadata"]["labels"] == labels
    assert "Too long" not in operator.log_path.read_text(errors="replace"), operator.log_tail()


@pytest.mark.usefixtures("wrc")
def test_a_record_with_the_metadata_is_rewritten_with_the_spec_alone(
    namespace: str, admin: client.ApiClient, operator: OperatorProcess
) -> None:
    """A policy an earlier operator handled: its record holds labels and annotations
    besides the spec. The operator handles it and rewrites the record without them."""
    old_record = {
        "metadata": {"labels": {"team": "ml"}, "annotations": {"example.com/notes": "x"}},
        "spec": SPEC,
    }
    create_policy(
        admin,
        namespace,
        labels={"team": "ml"},
        annotations={"example.com/notes": "x", RECORD: json.dumps(old_record) + "\n"},
        finalizers=[FINALIZER],
    )
    operator.start()
    wait_ready(admin, namespace, operator)
    policy = wait_record(admin, namespace, operator, enabled=True)
    assert policy["metadata"]["labels"] == {"team": "ml"}
    assert policy["metadata"]["annotations"]["example.com/notes"] == "x"
