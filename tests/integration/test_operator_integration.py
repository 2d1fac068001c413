"""The real kopf operator against a real Kubernetes API server.

Every test runs `kopf run -m spillover_operator.main` as a subprocess with the
credentials of a ServiceAccount bound to the Role from manifests/base (moved into the
test's namespace): passing tests also prove that Role is enough. The local control
plane (tests/controlplane) has a real kube-controller-manager and kwok, so Deployments
really roll out.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import (
    CRD_FILE,
    condition,
    connection,
    container_manifest,
    current,
    deployment_manifest,
    env_map,
    install_crd,
    is_ready,
    model,
    policy_gone,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client
from kubernetes.client import ApiException
from spillover_operator.client import list_policies, patch_policy
from spillover_operator.domain.model import (
    BUDGET_VAR,
    ENABLED_VAR,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    THRESHOLD_VAR,
)
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"
WRC = "workflow-recipe-controller"
ALL_NAMES = ",".join(SPILLOVER_VARS)
WAIT = 90.0


# ---------------------------------------------------------------- cluster helpers


@dataclass
class Cluster:
    namespace: str
    api: Any
    control_plane: Any
    workdir: Path
    operators: list[OperatorProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.apps = client.AppsV1Api(self.api)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)

    # --- RBAC and the operator

    def install_rbac(self, *, drop: tuple[str, str] | None = None) -> Path:
        """The ServiceAccount, Role and RoleBinding of manifests/base, moved into this
        namespace; `drop=(resource, verb)` removes one verb. Returns a kubeconfig with
        the ServiceAccount's token."""
        sa = yaml.safe_load((BASE / "serviceaccount.yaml").read_text())
        role = yaml.safe_load((BASE / "role.yaml").read_text())
        binding = yaml.safe_load((BASE / "rolebinding.yaml").read_text())
        for obj in (sa, role, binding):
            obj["metadata"]["namespace"] = self.namespace
        binding["subjects"][0]["namespace"] = self.namespace
        if drop is not None:
            resource, verb = drop
            granting = [
                r for r in role["rules"] if resource in r["resources"] and verb in r["verbs"]
            ]
            assert granting, f"{verb} not granted on {resource}"
            for rule in granting:
                rule["verbs"].remove(verb)
            role["rules"] = [r for r in role["rules"] if r["verbs"]]  # no empty rule
        self.core.create_namespaced_service_account(
            self.namespace, model(client.V1ServiceAccount, sa)
        )
        self.rbac.create_namespaced_role(self.namespace, model(client.V1Role, role))
        self.rbac.create_namespaced_role_binding(
            self.namespace, model(client.V1RoleBinding, binding)
        )
        return Path(
            self.control_plane.service_account_kubeconfig(self.namespace, sa["metadata"]["name"])
        )

    def start_operator(self, *, drop: tuple[str, str] | None = None) -> OperatorProcess:
        op = OperatorProcess(
            self.namespace, self.install_rbac(drop=drop), self.workdir, resync_seconds=300
        )
        self.operators.append(op)
        return op.start()

    # --- Deployments

    def create_wrc(self, body: dict[str, Any] | None = None) -> dict[str, Any]:
        body = body or wrc_body()
        self.apps.create_namespaced_deployment(self.namespace, model(client.V1Deployment, body))
        return self.deployment(body["metadata"]["name"])

    def deployment(self, name: str = WRC) -> dict[str, Any]:
        return read_deployment(self.api, self.namespace, name)

    def patch_wrc_by_hand(self, patch: dict[str, Any], name: str = WRC) -> None:
        self.apps.patch_namespaced_deployment(
            name,
            self.namespace,
            patch,
            _content_type="application/strategic-merge-patch+json",
        )

    # --- policies

    def create_policy(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = policy_manifest(self.namespace, spec, name)
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        return self.policy(name)

    def policy(self, name: str) -> dict[str, Any]:
        return read_policy(self.api, self.namespace, name)

    def policy_gone(self, name: str) -> bool:
        return policy_gone(self.api, self.namespace, name)

    def patch_policy(self, name: str, spec_patch: dict[str, Any]) -> dict[str, Any]:
        return patch_policy(connection(self.api, self.namespace), name, {"spec": spec_patch})

    def delete_policy(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def events(self, reason: str, kind: str | None = None) -> list[dict[str, Any]]:
        raw: Any = self.core.list_namespaced_event(self.namespace, _preload_content=False)
        items: list[dict[str, Any]] = json.loads(raw.data)["items"]
        return [
            e
            for e in items
            if e.get("reason") == reason
            and (kind is None or e["involvedObject"].get("kind") == kind)
        ]

    # --- waiting

    def wait_policy(
        self, name: str, check: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        op = self.operators[-1] if self.operators else None
        last: dict[str, Any] = {}

        def probe() -> dict[str, Any] | None:
            nonlocal last
            last = self.policy(name)
            return last if check(last) else None

        try:
            found: dict[str, Any] = wait_for(f"policy {name}: {what}", probe, operator=op)
            return found
        except pytest.fail.Exception as exc:
            raise AssertionError(f"{exc}\nlast status: {json.dumps(last.get('status'))}") from None

    def wait_ready(self, name: str) -> dict[str, Any]:
        """Ready=True for the policy's current generation (applied and rolled out)."""
        return self.wait_policy(name, is_ready, "Ready=True for its generation")

    def wait_reason(self, name: str, reason: str) -> dict[str, Any]:
        return self.wait_policy(
            name,
            lambda p: current(p) and condition(p, "Ready").get("reason") == reason,
            f"Ready reason {reason}",
        )


def assert_untouched(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Nobody changed the Deployment's spec (its status moves with the rollout)."""
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"] == before["spec"]


def settled(dep: dict[str, Any]) -> bool:
    """The Deployment controller is done with the current generation (no status writes
    pending)."""
    status = dep.get("status") or {}
    conds = {c["type"]: c for c in status.get("conditions") or []}
    progressing = conds.get("Progressing", {})
    return bool(
        status.get("observedGeneration") == dep["metadata"]["generation"]
        and progressing.get("reason") == "NewReplicaSetAvailable"
        and conds.get("Available", {}).get("status") == "True"
    )


def wrc_body(
    *, name: str = WRC, replicas: int = 1, containers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    if containers is None:
        env = {"LOG_LEVEL": "info", PASSTHROUGH_VAR: "OPENAI_BASE_URL"}
        containers = [container_manifest("wrc", "registry.example/wrc:1.0", env)]
    return deployment_manifest(name, containers, replicas=replicas)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def crd(control_plane: Any) -> Iterator[dict[str, Any]]:
    """The CRD from manifests/crd, installed once per session."""
    doc = yaml.safe_load(CRD_FILE.read_text())
    with control_plane.api_client() as api:
        install_crd(api, doc)
    yield doc


@pytest.fixture
def cluster(
    control_plane: Any, namespace: str, crd: dict[str, Any], tmp_path: Path
) -> Iterator[Cluster]:
    with control_plane.api_client() as api:
        c = Cluster(namespace, api, control_plane, tmp_path)
        try:
            yield c
        finally:
            for op in c.operators:
                op.stop()
            # Let the namespace go: drop finalizers left by a stopped operator.
            conn = connection(api, namespace)
            for item in list_policies(conn):
                if item["metadata"].get("finalizers"):
                    patch_policy(conn, item["metadata"]["name"], {"metadata": {"finalizers": None}})


# ---------------------------------------------------------------- tests


def test_create_applies_and_reports_status_events_metrics(cluster: Cluster) -> None:
    cluster.create_wrc(wrc_body(replicas=2))
    op = cluster.start_operator()
    cluster.create_policy("spillover", {"enabled": True, "target": {"deployment": WRC}})

    policy = cluster.wait_ready("spillover")
    dep = cluster.deployment()
    env = env_map(dep)
    assert env[ENABLED_VAR] == "true"
    assert THRESHOLD_VAR not in env and BUDGET_VAR not in env
    assert env[PASSTHROUGH_VAR] == f"OPENAI_BASE_URL,{ALL_NAMES}"
    assert env["LOG_LEVEL"] == "info"

    status = policy["status"]
    assert status["effective"] == {"enabled": "true", "passthrough": f"OPENAI_BASE_URL,{ALL_NAMES}"}
    assert status["target"] == {"deployment": WRC, "container": "wrc"}
    assert condition(policy, "Applied")["status"] == "True"
    assert condition(policy, "Ready")["reason"] == "RolloutComplete"
    rollout = status["rollout"]
    assert rollout["complete"] is True
    assert rollout["desired"] == rollout["updated"] == rollout["available"] == 2
    assert rollout["generation"] == dep["metadata"]["generation"]
    assert "killSwitch" not in status
    # The Deployment's own view agrees that the rollout finished.
    assert dep["status"]["updatedReplicas"] == 2 and dep["status"]["availableReplicas"] == 2

    # kopf watches the Deployment with an event handler only: it leaves no finalizer or
    # annotation of its own there.
    assert not dep["metadata"].get("finalizers")
    annotations = dep["metadata"].get("annotations") or {}
    assert not [k for k in annotations if "kopf" in k or k.startswith("spillover.clerum.io")]
    managers = {m["manager"] for m in dep["metadata"].get("managedFields") or []}
    assert "spillover-operator" in managers

    applied = cluster.events("Applied")
    assert {e["involvedObject"]["kind"] for e in applied} == {"SpilloverPolicy", "Deployment"}
    assert op.metric("spillover_operator_policy_enabled", policy="spillover") == 1
    assert op.metric("spillover_operator_reconcile_total", result="applied") >= 1


def test_update_kill_and_restore(cluster: Cluster) -> None:
    cluster.create_wrc()
    op = cluster.start_operator()
    cluster.create_policy(
        "spillover", {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": WRC}}
    )
    cluster.wait_ready("spillover")
    gen = cluster.deployment()["metadata"]["generation"]
    assert env_map(cluster.deployment())[THRESHOLD_VAR] == "32768"

    # update: a budget, threshold unset
    cluster.patch_policy("spillover", {"budgetBytes": 2097152, "thresholdBytes": None})
    cluster.wait_ready("spillover")
    dep = cluster.deployment()
    env = env_map(dep)
    assert env[BUDGET_VAR] == "2097152" and THRESHOLD_VAR not in env
    assert dep["metadata"]["generation"] == gen + 1  # one change, one new generation

    # kill
    cluster.patch_policy("spillover", {"enabled": False})
    policy = cluster.wait_ready("spillover")
    dep = cluster.deployment()
    assert env_map(dep)[ENABLED_VAR] == "false"
    assert dep["metadata"]["generation"] == gen + 2
    engaged = policy["status"]["killSwitch"]["engagedAt"]
    assert engaged
    assert policy["status"]["effective"]["enabled"] == "false"
    assert op.metric("spillover_operator_policy_enabled", policy="spillover") == 0

    # restore
    cluster.patch_policy("spillover", {"enabled": True})
    policy = cluster.wait_ready("spillover")
    dep = cluster.deployment()
    assert env_map(dep)[ENABLED_VAR] == "true"
    assert dep["metadata"]["generation"] == gen + 3
    assert "killSwitch" not in policy["status"]
    assert env_map(dep)[PASSTHROUGH_VAR] == f"OPENAI_BASE_URL,{ALL_NAMES}"


def test_drift_is_corrected(cluster: Cluster) -> None:
    cluster.create_wrc()
    op = cluster.start_operator()
    cluster.create_policy("spillover", {"enabled": False, "target": {"deployment": WRC}})
    cluster.wait_ready("spillover")

    # Someone turns spillover back on by hand and drops the passthrough list.
    cluster.patch_wrc_by_hand(
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "wrc",
                                "env": [
                                    {"name": ENABLED_VAR, "value": "true"},
                                    {"name": PASSTHROUGH_VAR, "$patch": "delete"},
                                ],
                            }
                        ]
                    }
                }
            }
        }
    )

    def restored() -> bool:
        env = env_map(cluster.deployment())
        return env.get(ENABLED_VAR) == "false" and env.get(PASSTHROUGH_VAR) == ALL_NAMES

    wait_for("the operator to restore the env", restored, operator=op)
    drift = wait_for(
        "DriftCorrected Events on the policy and the Deployment",
        lambda: len({e["involvedObject"]["kind"] for e in cluster.events("DriftCorrected")}) == 2,
        operator=op,
    )
    assert drift
    # The metric is recorded when the reconcile returns, after its Events are posted.
    wait_for(
        "the drift-correction metric",
        lambda: op.metric("spillover_operator_drift_corrections_total", policy="spillover") >= 1,
        operator=op,
    )
    cluster.wait_ready("spillover")


def test_late_target_is_applied_when_it_appears(cluster: Cluster) -> None:
    cluster.start_operator()
    cluster.create_policy(
        "spillover", {"enabled": True, "thresholdBytes": 65536, "target": {"deployment": WRC}}
    )
    policy = cluster.wait_reason("spillover", "TargetNotFound")
    assert condition(policy, "Applied")["status"] == "False"
    assert WRC in condition(policy, "Ready")["message"]

    cluster.create_wrc()
    cluster.wait_ready("spillover")
    assert env_map(cluster.deployment())[THRESHOLD_VAR] == "65536"


def test_missing_container_is_target_not_found_naming_the_containers(cluster: Cluster) -> None:
    before = cluster.create_wrc()
    cluster.start_operator()
    cluster.create_policy(
        "spillover", {"enabled": True, "target": {"deployment": WRC, "container": "nope"}}
    )
    policy = cluster.wait_reason("spillover", "TargetNotFound")
    assert "'nope' not found" in condition(policy, "Ready")["message"]
    assert "wrc" in condition(policy, "Ready")["message"]
    assert_untouched(before, cluster.deployment())


def test_conflict_touches_nothing_and_hands_over_on_delete(cluster: Cluster) -> None:
    cluster.create_wrc()
    cluster.start_operator()
    cluster.create_policy(
        "first", {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": WRC}}
    )
    cluster.wait_ready("first")
    cluster.create_policy("second", {"enabled": False, "target": {"deployment": WRC}})
    policy = cluster.wait_reason("second", "Conflict")
    assert "'first'" in condition(policy, "Ready")["message"]
    assert condition(policy, "Applied")["status"] == "False"
    env = env_map(cluster.deployment())
    assert env[ENABLED_VAR] == "true" and env[THRESHOLD_VAR] == "32768"
    assert cluster.policy("first")["status"]["observedGeneration"] == 1
    assert is_ready(cluster.policy("first"))

    # The older one goes (Retain): the waiting one takes over.
    cluster.delete_policy("first")
    wait_for("policy first to be deleted", lambda: cluster.policy_gone("first"))
    cluster.wait_ready("second")
    env = env_map(cluster.deployment())
    assert env[ENABLED_VAR] == "false"
    assert THRESHOLD_VAR not in env


def test_conflict_hands_over_at_once_when_the_owner_is_retargeted(cluster: Cluster) -> None:
    """The waiting policy is re-evaluated when the owner moves to another Deployment,
    not at the next resync (the operator runs with a 300 s resync here). The owner
    moves to an allowed name with no Deployment yet (the Role may patch only the WRC)."""
    cluster.create_wrc()
    cluster.start_operator()
    cluster.create_policy(
        "first", {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": WRC}}
    )
    cluster.wait_ready("first")
    cluster.create_policy("second", {"enabled": False, "target": {"deployment": WRC}})
    cluster.wait_reason("second", "Conflict")

    cluster.patch_policy("first", {"target": {"deployment": "wrc"}})
    cluster.wait_ready("second")
    cluster.wait_reason("first", "TargetNotFound")
    env = env_map(cluster.deployment())
    assert env[ENABLED_VAR] == "false"
    assert THRESHOLD_VAR not in env


def store_under_looser_crd(
    cluster: Cluster, crd: dict[str, Any], loose: dict[str, Any], spec: dict[str, Any], what: str
) -> None:
    """Store policy `spillover` with `spec` the way an invalid one really gets stored:
    while a looser version of the same CRD is installed (waiting until the API server
    accepts it), then put the real CRD back (stored objects are not re-validated)."""

    def create() -> bool:
        try:
            cluster.create_policy("spillover", spec)
        except ApiException as exc:
            if exc.status == 422:  # the looser schema is not in effect yet
                return False
            raise
        return True

    try:
        install_crd(cluster.api, loose)
        wait_for(f"the looser CRD to accept {what}", create, timeout=60)
    finally:
        install_crd(cluster.api, crd)


def test_invalid_spec_from_an_older_looser_crd(cluster: Cluster, crd: dict[str, Any]) -> None:
    """An invalid spec cannot be created through the real CRD (the API server rejects
    it), so reproduce how one really gets stored: a policy written while an older,
    looser version of the same CRD was installed. The same resource (group, version,
    plural) is re-installed without the bounds, the policy is created, the real CRD is
    put back (stored objects are not re-validated), and only then does the operator
    see it."""
    before = cluster.create_wrc()
    loose = copy.deepcopy(crd)
    props = loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    threshold = props["spec"]["properties"]["thresholdBytes"]
    threshold.pop("minimum")
    store_under_looser_crd(
        cluster,
        crd,
        loose,
        {"enabled": True, "thresholdBytes": 100, "target": {"deployment": WRC}},
        "thresholdBytes=100",
    )
    # The real CRD is back: the same value is rejected again, naming the field.
    rejection: list[str] = []

    def rejected() -> bool:
        try:
            cluster.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                cluster.namespace,
                PLURAL,
                "spillover",
                {"spec": {"thresholdBytes": 99}},
                dry_run="All",
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status == 422:
                rejection.append(str(exc.body))
                return True
            raise
        return False

    wait_for("the real CRD to reject thresholdBytes=99 again", rejected, timeout=60)
    assert "spec.thresholdBytes" in rejection[-1]

    cluster.start_operator()
    policy = cluster.wait_reason("spillover", "InvalidSpec")
    message = condition(policy, "Ready")["message"]
    assert "spec.thresholdBytes: 100 is below the minimum 4096" in message
    assert condition(policy, "Applied")["reason"] == "InvalidSpec"
    after = cluster.deployment()
    assert_untouched(before, after)
    assert ENABLED_VAR not in env_map(after)


def test_a_policy_without_enabled_from_an_older_crd_is_refused_not_turned_on(
    cluster: Cluster, crd: dict[str, Any]
) -> None:
    """A policy stored while an older CRD left `enabled` optional (client-side `kubectl
    apply` sends `enabled: null` as absent) says neither on nor off: the operator refuses
    it, naming the field and the fix, and never writes ENABLED=true."""
    before = cluster.create_wrc()
    loose = copy.deepcopy(crd)
    spec_schema = loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["required"] = [f for f in spec_schema["required"] if f != "enabled"]
    store_under_looser_crd(
        cluster, crd, loose, {"target": {"deployment": WRC}}, "a policy without enabled"
    )
    assert "enabled" not in cluster.policy("spillover")["spec"]

    cluster.start_operator()
    policy = cluster.wait_reason("spillover", "InvalidSpec")
    message = condition(policy, "Ready")["message"]
    assert "spec.enabled: required, with no default" in message, message
    assert "`enabled: false` (spillover off)" in message, message
    assert condition(policy, "Applied")["reason"] == "InvalidSpec"
    after = cluster.deployment()
    assert_untouched(before, after)
    assert ENABLED_VAR not in env_map(after)


@pytest.mark.parametrize("on_delete", ["Retain", "Remove"])
def test_delete_with_on_delete(cluster: Cluster, on_delete: str) -> None:
    cluster.create_wrc()
    op = cluster.start_operator()
    cluster.create_policy(
        "spillover",
        {
            "enabled": True,
            "thresholdBytes": 32768,
            "budgetBytes": 2097152,
            "onDelete": on_delete,
            "target": {"deployment": WRC},
        },
    )
    cluster.wait_ready("spillover")
    assert "spillover.clerum.io/finalizer" in cluster.policy("spillover")["metadata"]["finalizers"]
    applied = cluster.deployment()

    cluster.delete_policy("spillover")
    wait_for("the policy to be deleted", lambda: cluster.policy_gone("spillover"), operator=op)
    dep = cluster.deployment()
    env = env_map(dep)
    if on_delete == "Retain":
        assert_untouched(applied, dep)
        assert env[ENABLED_VAR] == "true" and env[THRESHOLD_VAR] == "32768"
        assert not cluster.events("Removed")
    else:
        assert not set(SPILLOVER_VARS) & set(env)
        assert env[PASSTHROUGH_VAR] == f"OPENAI_BASE_URL,{ALL_NAMES}"  # names stay
        assert env["LOG_LEVEL"] == "info"
        assert dep["metadata"]["generation"] == applied["metadata"]["generation"] + 1
        kinds = {e["involvedObject"]["kind"] for e in cluster.events("Removed")}
        assert "Deployment" in kinds


def test_the_finalizer_comes_off_even_when_kopf_s_annotation_writes_fail(
    cluster: Cluster,
) -> None:
    """A policy whose annotations fill the API server's 256 KiB but for 8 bytes
    (admitted where the shipped spillover-annotations-size policy is not installed):
    kopf's own writes, which add its annotations (its record, its progress), fail with
    422. Deleting it still removes the finalizer (the operator's plain JSON patch), so
    the policy goes."""
    cluster.create_wrc()
    op = cluster.start_operator()
    body = policy_manifest(
        cluster.namespace, {"enabled": True, "target": {"deployment": WRC}}, "spillover"
    )
    key = "example.com/notes"
    body["metadata"]["annotations"] = {key: "x" * (256 * 1024 - len(key) - 8)}
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, body)
    cluster.wait_policy(
        "spillover",
        lambda p: "spillover.clerum.io/finalizer" in (p["metadata"].get("finalizers") or []),
        "the operator's finalizer",
    )
    cluster.delete_policy("spillover")
    wait_for("the policy to be deleted", lambda: cluster.policy_gone("spillover"), operator=op)


def test_restart_writes_nothing(cluster: Cluster) -> None:
    cluster.create_wrc()
    op = cluster.start_operator()
    cluster.create_policy(
        "spillover", {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": WRC}}
    )
    cluster.wait_ready("spillover")
    # Let the rollout finish and its last status writes land (the Deployment's, then
    # the operator's view of them in the policy status), so that any later write is one
    # the restart caused.
    wait_for("the Deployment to settle", lambda: settled(cluster.deployment()), operator=op)
    dep_before = cluster.deployment()

    def status_caught_up() -> bool:
        rollout = cluster.policy("spillover")["status"]["rollout"]
        return bool(
            rollout["complete"]
            and rollout["observedGeneration"] == dep_before["metadata"]["generation"]
        )

    wait_for("the policy status to report the finished rollout", status_caught_up, operator=op)
    status_before = cluster.policy("spillover")["status"]
    op.stop()

    op.start()
    # The restarted operator reconciled the policy (resume) and saw the Deployment
    # (initial listing), and found nothing to change.
    wait_for(
        "the restarted operator to reconcile twice",
        lambda: op.metric("spillover_operator_reconcile_total", result="in_sync") >= 2,
        operator=op,
    )
    dep_after = cluster.deployment()
    assert dep_after["metadata"]["resourceVersion"] == dep_before["metadata"]["resourceVersion"]
    assert dep_after["metadata"]["generation"] == dep_before["metadata"]["generation"]
    assert cluster.policy("spillover")["status"] == status_before
    assert op.metric("spillover_operator_reconcile_total", result="applied") == 0


def test_patch_semantics_multi_container_wrc(cluster: Cluster) -> None:
    """Only the target container's three variables and passthrough list change; every
    other container, env entry (values, valueFrom, order), envFrom and field is kept
    byte-for-byte; one real change makes exactly one new generation."""
    containers: list[dict[str, Any]] = [
        {
            "name": "proxy",
            "image": "registry.example/proxy:2",
            "env": [{"name": ENABLED_VAR, "value": "untouched"}],
        },
        {
            "name": "controller",
            "image": "registry.example/wrc:1.0",
            "args": ["--recipes=/etc/recipes"],
            "envFrom": [
                {"configMapRef": {"name": "wrc-config"}},
                {"secretRef": {"name": "wrc-secrets", "optional": True}, "prefix": "S_"},
            ],
            "env": [
                {"name": "LOG_LEVEL", "value": "debug"},
                {
                    "name": THRESHOLD_VAR,
                    "valueFrom": {"configMapKeyRef": {"name": "old", "key": "threshold"}},
                },
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": BUDGET_VAR, "value": "9999999"},
                {"name": PASSTHROUGH_VAR, "value": " OPENAI_BASE_URL ,LOG_LEVEL"},
                {"name": "EMPTY", "value": ""},
                {"name": "TRAILING", "value": "x, y ,"},
            ],
        },
    ]
    before = cluster.create_wrc(wrc_body(containers=containers))
    cluster.start_operator()
    cluster.create_policy(
        "spillover",
        {
            "enabled": True,
            "thresholdBytes": 32768,
            "target": {"deployment": WRC, "container": "controller"},
        },
    )
    cluster.wait_ready("spillover")
    after = cluster.deployment()

    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    tpl_before, tpl_after = before["spec"]["template"], after["spec"]["template"]
    assert tpl_after["spec"]["containers"][0] == tpl_before["spec"]["containers"][0]
    ctl_before, ctl_after = (
        tpl_before["spec"]["containers"][1],
        tpl_after["spec"]["containers"][1],
    )
    assert {k: v for k, v in ctl_after.items() if k != "env"} == {
        k: v for k, v in ctl_before.items() if k != "env"
    }
    assert ctl_after["env"] == [
        {"name": "LOG_LEVEL", "value": "debug"},
        {"name": THRESHOLD_VAR, "value": "32768"},
        {
            "name": "POD_NAME",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        },
        # budgetBytes is unset, but the envFrom ConfigMap wrc-config (missing, so unknown)
        # may set the variable: the mcp-host default is written explicitly, in place.
        {"name": BUDGET_VAR, "value": "16777216"},
        {"name": PASSTHROUGH_VAR, "value": f"OPENAI_BASE_URL,LOG_LEVEL,{ALL_NAMES}"},
        {"name": "EMPTY"},
        {"name": "TRAILING", "value": "x, y ,"},
        {"name": ENABLED_VAR, "value": "true"},
    ]
    assert {k: v for k, v in tpl_after["spec"].items() if k != "containers"} == {
        k: v for k, v in tpl_before["spec"].items() if k != "containers"
    }
    assert {k: v for k, v in after["spec"].items() if k != "template"} == {
        k: v for k, v in before["spec"].items() if k != "template"
    }

    # A complete passthrough list is never rewritten, whatever its spacing.
    odd = f" {ENABLED_VAR} ,OPENAI_BASE_URL,{THRESHOLD_VAR},, {BUDGET_VAR}"
    cluster.patch_wrc_by_hand(
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "controller", "env": [{"name": PASSTHROUGH_VAR, "value": odd}]}
                        ]
                    }
                }
            }
        }
    )
    cluster.patch_policy("spillover", {"thresholdBytes": 65536})
    cluster.wait_ready("spillover")
    env = env_map(cluster.deployment(), "controller")
    assert env[THRESHOLD_VAR] == "65536"
    assert env[PASSTHROUGH_VAR] == odd


def test_passthrough_from_value_from_is_not_supported(cluster: Cluster) -> None:
    ref = {"configMapKeyRef": {"name": "wrc", "key": "passthrough"}}
    before = cluster.create_wrc(
        wrc_body(
            containers=[
                {
                    "name": "wrc",
                    "image": "wrc:1",
                    "env": [{"name": PASSTHROUGH_VAR, "valueFrom": ref}],
                }
            ]
        )
    )
    cluster.start_operator()
    cluster.create_policy("spillover", {"enabled": True, "target": {"deployment": WRC}})
    policy = cluster.wait_reason("spillover", "TargetNotSupported")
    assert "valueFrom" in condition(policy, "Ready")["message"]
    assert_untouched(before, cluster.deployment())


def test_role_without_deployment_patch_fails_visibly(cluster: Cluster) -> None:
    """The Role from manifests/base is exactly enough (every other test runs with it);
    take away one verb the operator needs and it fails, says why, and changes nothing."""
    before = cluster.create_wrc()
    op = cluster.start_operator(drop=("deployments", "patch"))
    cluster.create_policy("spillover", {"enabled": True, "target": {"deployment": WRC}})
    policy = cluster.wait_reason("spillover", "ApplyFailed")
    message = condition(policy, "Ready")["message"]
    assert "403" in message and "forbidden" in message.lower()
    assert_untouched(before, cluster.deployment())
    assert op.metric("spillover_operator_reconcile_total", result="error") >= 1


CRD_BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    (
        {"enabled": True, "thresholdBytes": 4095, "target": {"deployment": WRC}},
        "spec.thresholdBytes",
    ),
    (
        {"enabled": True, "thresholdBytes": 1048577, "target": {"deployment": WRC}},
        "spec.thresholdBytes",
    ),
    (
        {"enabled": True, "thresholdBytes": "32768", "target": {"deployment": WRC}},
        "spec.thresholdBytes",
    ),
    ({"enabled": True, "budgetBytes": 1048575, "target": {"deployment": WRC}}, "spec.budgetBytes"),
    (
        {"enabled": True, "budgetBytes": 268435457, "target": {"deployment": WRC}},
        "spec.budgetBytes",
    ),
    ({"enabled": "false", "target": {"deployment": WRC}}, "spec.enabled"),
    ({"enabled": True, "onDelete": "Delete", "target": {"deployment": WRC}}, "spec.onDelete"),
    ({"enabled": True}, "spec.target"),
    ({"target": {"deployment": WRC}}, "spec.enabled"),  # required, no default
    ({"enabled": True, "target": {}}, "spec.target.deployment"),
    ({"enabled": True, "target": {"deployment": "Bad_Name"}}, "spec.target.deployment"),
    ({"enabled": True, "target": {"deployment": WRC, "container": "a.b"}}, "spec.target.container"),
]
# An unknown field (spec.treshold) is kept by the CRD, never pruned: the admission policy
# spillover-policy-fields refuses it, or without it the operator (InvalidSpec). Both in
# tests/integration/test_policy_inputs_refused.py.


@pytest.mark.parametrize(
    ("spec", "path"), CRD_BAD_VALUES, ids=[f"{p}-{i}" for i, (_, p) in enumerate(CRD_BAD_VALUES)]
)
def test_crd_rejects_bad_values_naming_the_field(
    cluster: Cluster, spec: dict[str, Any], path: str
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpilloverPolicy",
        "metadata": {"name": "bad", "namespace": cluster.namespace},
        "spec": spec,
    }
    with pytest.raises(ApiException) as info:
        cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, body, field_validation="Strict"
        )
    assert info.value.status in (400, 422)
    assert path in str(info.value.body)
    assert cluster.policy_gone("bad")
