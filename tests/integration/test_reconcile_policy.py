"""reconcile_policy and finalize_policy called directly (no kopf) against the real API
server of the local control plane, with the client library's connection: what they
write to the Deployment and the policy status, the Events, and what they return."""

from __future__ import annotations

from typing import Any

import pytest
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    condition,
    container_manifest,
    create_object,
    deployment_manifest,
    env_map,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kubernetes import client
from spillover_operator.client import Connection, connect
from spillover_operator.domain.allowlist import ALLOWED_TARGETS_VAR
from spillover_operator.domain.constants import FIELD_MANAGER
from spillover_operator.domain.model import (
    BUDGET_VAR,
    ENABLED_VAR,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    THRESHOLD_VAR,
    PolicySpec,
)
from spillover_operator.domain.policy import PolicyCopy
from spillover_operator.domain.rollout import rollout_state
from spillover_operator.domain.settings import from_environ
from spillover_operator.reconciler.reconcile import (
    ApiReader,
    ApplyFailedError,
    Outcome,
    apply_change,
    finalize_policy,
    reconcile_policy,
)

pytestmark = pytest.mark.integration

ALL_NAMES = ",".join(SPILLOVER_VARS)


# The operator configures only allowed Deployments; these tests' WRC is `wrc`.
SETTINGS = from_environ({ALLOWED_TARGETS_VAR: "wrc"})


@pytest.fixture
def cluster(control_plane: LocalCluster, admin: client.ApiClient, namespace: str) -> Connection:
    """The operator's kind of connection (its field manager), from the admin kubeconfig."""
    return connect(str(control_plane.kubeconfig), None, namespace, field_manager=FIELD_MANAGER)


def _wrc(namespace: str, env: dict[str, str]) -> dict[str, Any]:
    containers = [
        container_manifest("controller", "example.invalid/wrc:1", env),
        container_manifest("sidecar", "example.invalid/sidecar:1"),
    ]
    return deployment_manifest("wrc", containers, namespace=namespace)


def _events(api: client.ApiClient, namespace: str, name: str, reason: str) -> list[Any]:
    selector = f"involvedObject.name={name},reason={reason}"
    return list(
        client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=selector).items
    )


def _rolled_out(api: client.ApiClient, namespace: str) -> bool:
    return rollout_state(read_deployment(api, namespace, "wrc")).complete


def test_apply_then_in_sync_then_drift_corrected(
    cluster: Connection, admin: client.ApiClient, namespace: str
) -> None:
    create_object(admin, _wrc(namespace, {"LOG_LEVEL": "info", PASSTHROUGH_VAR: "A"}))
    spec = {"enabled": False, "thresholdBytes": 32768, "target": {"deployment": "wrc"}}
    create_object(admin, policy_manifest(namespace, spec))

    result = reconcile_policy(cluster, namespace, "spillover", settings=SETTINGS)
    assert result.outcome == Outcome.APPLIED, result.message
    env = env_map(read_deployment(admin, namespace, "wrc"), "controller")
    assert env[ENABLED_VAR] == "false" and env[THRESHOLD_VAR] == "32768"
    assert BUDGET_VAR not in env and env["LOG_LEVEL"] == "info"
    assert env[PASSTHROUGH_VAR] == f"A,{ALL_NAMES}"
    policy = read_policy(admin, namespace)
    assert policy["status"]["observedGeneration"] == policy["metadata"]["generation"]
    assert condition(policy, "Applied")["status"] == "True"
    assert policy["status"]["killSwitch"]["engagedAt"]
    assert policy["status"]["target"] == {"deployment": "wrc", "container": "controller"}
    assert _events(admin, namespace, "spillover", "Applied")
    assert _events(admin, namespace, "wrc", "Applied")

    # Once rolled out: Ready; then a resync writes nothing at all.
    wait_for("the rollout", lambda: _rolled_out(admin, namespace))
    assert (
        reconcile_policy(cluster, namespace, "spillover", settings=SETTINGS).outcome
        == Outcome.IN_SYNC
    )
    ready = read_policy(admin, namespace)
    assert condition(ready, "Ready")["reason"] == "RolloutComplete"
    dep = read_deployment(admin, namespace, "wrc")
    again = reconcile_policy(cluster, namespace, "spillover", settings=SETTINGS)
    assert (again.outcome, again.ready) == (Outcome.IN_SYNC, True)
    assert (
        read_policy(admin, namespace)["metadata"]["resourceVersion"]
        == (ready["metadata"]["resourceVersion"])
    )
    assert (
        read_deployment(admin, namespace, "wrc")["metadata"]["generation"]
        == (dep["metadata"]["generation"])
    )

    # A hand edit of the env is drift: restored, with a DriftCorrected Event.
    client.AppsV1Api(admin).patch_namespaced_deployment(
        "wrc",
        namespace,
        {"spec": {"template": {"spec": {"containers": [
            {"name": "controller", "env": [{"name": ENABLED_VAR, "value": "true"}]}
        ]}}}},
    )  # fmt: skip
    drift = reconcile_policy(cluster, namespace, "spillover", settings=SETTINGS)
    assert drift.outcome == Outcome.DRIFT_CORRECTED
    assert env_map(read_deployment(admin, namespace, "wrc"), "controller")[ENABLED_VAR] == "false"
    assert _events(admin, namespace, "wrc", "DriftCorrected")


def test_refusals_change_nothing_and_say_why(
    cluster: Connection, admin: client.ApiClient, namespace: str
) -> None:
    assert (
        reconcile_policy(cluster, namespace, "spillover", settings=SETTINGS).outcome == Outcome.GONE
    )

    create_object(
        admin, policy_manifest(namespace, {"enabled": True, "target": {"deployment": "wrc"}})
    )
    missing = reconcile_policy(cluster, namespace, "spillover", settings=SETTINGS)
    assert missing.outcome == Outcome.TARGET_NOT_FOUND
    assert condition(read_policy(admin, namespace), "Ready")["reason"] == "TargetNotFound"

    before = create_object(admin, _wrc(namespace, {}))
    create_object(
        admin,
        policy_manifest(
            namespace,
            {"enabled": True, "target": {"deployment": "wrc", "container": "nope"}},
            "wrong-container",
        ),
    )
    wrong = reconcile_policy(cluster, namespace, "wrong-container", settings=SETTINGS)
    assert wrong.outcome == Outcome.CONFLICT  # "spillover" is older and owns wrc
    assert "policy 'spillover' (older) already manages Deployment" in wrong.message
    assert condition(read_policy(admin, namespace, "wrong-container"), "Ready")["reason"] == (
        "Conflict"
    )
    after = read_deployment(admin, namespace, "wrc")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]

    client.CustomObjectsApi(admin).delete_namespaced_custom_object(
        "spillover.clerum.io", "v1alpha1", namespace, "spilloverpolicies", "spillover"
    )
    gone = reconcile_policy(cluster, namespace, "wrong-container", settings=SETTINGS)
    assert gone.outcome == Outcome.TARGET_NOT_FOUND
    assert "container 'nope' not found" in gone.message and "sidecar" in gone.message
    assert (
        read_deployment(admin, namespace, "wrc")["metadata"]["generation"]
        == (before["metadata"]["generation"])
    )


def test_finalize_with_remove_takes_the_variables_back(
    cluster: Connection, admin: client.ApiClient, namespace: str
) -> None:
    create_object(admin, _wrc(namespace, {PASSTHROUGH_VAR: "A"}))
    spec = {
        "enabled": True,
        "budgetBytes": 2097152,
        "onDelete": "Remove",
        "target": {"deployment": "wrc"},
    }
    create_object(admin, policy_manifest(namespace, spec))
    assert (
        reconcile_policy(cluster, namespace, "spillover", settings=SETTINGS).outcome
        == Outcome.APPLIED
    )

    deleted = read_policy(admin, namespace)
    result = finalize_policy(cluster, PolicyCopy(deleted), None, SETTINGS)
    assert result.outcome == Outcome.REMOVED
    env = env_map(read_deployment(admin, namespace, "wrc"), "controller")
    assert not set(SPILLOVER_VARS) & set(env)
    assert env[PASSTHROUGH_VAR] == f"A,{ALL_NAMES}"  # the passthrough names stay
    assert _events(admin, namespace, "wrc", "Removed")


def test_a_refused_patch_raises_and_reports_apply_failed(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="no-patch"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="no-patch"),
            rules=[
                client.V1PolicyRule(
                    api_groups=["spillover.clerum.io"],
                    resources=["spilloverpolicies", "spilloverpolicies/status"],
                    verbs=["get", "list", "patch"],
                ),
                client.V1PolicyRule(
                    api_groups=["apps"], resources=["deployments"], verbs=["get", "list"]
                ),
            ],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="no-patch"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="no-patch"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="no-patch", namespace=namespace)
            ],
        ),
    )
    before = create_object(admin, _wrc(namespace, {}))
    create_object(
        admin, policy_manifest(namespace, {"enabled": True, "target": {"deployment": "wrc"}})
    )
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "no-patch")
    limited = connect(str(kubeconfig), field_manager=FIELD_MANAGER)

    def refused() -> ApplyFailedError | None:
        try:
            reconcile_policy(limited, namespace, "spillover", settings=SETTINGS)
        except ApplyFailedError as exc:
            return exc
        return None

    # (RBAC takes a moment to reach the authorizer; until then the reads fail too.)
    error = wait_for("the patch to be refused", refused, retry_on=(Exception,))
    message = str(error)
    assert f"the API server refused the change to Deployment {namespace}/wrc (HTTP 403)" in message
    assert "may not patch deployments.apps" in message
    ready = condition(read_policy(admin, namespace), "Ready")
    assert ready["reason"] == "ApplyFailed" and "403" in ready["message"]
    after = read_deployment(admin, namespace, "wrc")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_a_change_applied_early_is_reported_once_by_the_reconcile(
    cluster: Connection, admin: client.ApiClient, namespace: str
) -> None:
    """The operator's fast path: apply_change writes only the Deployment; the reconcile
    given its EarlyApply reports it (Applied, Events once) instead of finding the
    Deployment in sync; a second reconcile with it posts no Event again."""
    create_object(admin, _wrc(namespace, {"LOG_LEVEL": "info"}))
    create_object(
        admin, policy_manifest(namespace, {"enabled": False, "target": {"deployment": "wrc"}})
    )
    reader = ApiReader(cluster.in_namespace(namespace))

    early = apply_change(cluster, namespace, "spillover", reader, SETTINGS)
    assert early is not None
    assert env_map(read_deployment(admin, namespace, "wrc"), "controller")[ENABLED_VAR] == "false"
    assert "status" not in read_policy(admin, namespace)  # nothing reported yet
    assert not _events(admin, namespace, "spillover", "Applied")
    assert (
        apply_change(cluster, namespace, "spillover", reader, SETTINGS) is None
    )  # nothing left to do

    result = reconcile_policy(cluster, namespace, "spillover", early=early, settings=SETTINGS)
    assert result.outcome == Outcome.APPLIED, result.message
    policy = read_policy(admin, namespace)
    assert condition(policy, "Applied")["status"] == "True"
    assert policy["status"]["lastAppliedTime"]
    assert len(_events(admin, namespace, "spillover", "Applied")) == 1
    assert len(_events(admin, namespace, "wrc", "Applied")) == 1

    reconcile_policy(cluster, namespace, "spillover", early=early, settings=SETTINGS)
    assert len(_events(admin, namespace, "spillover", "Applied")) == 1

    # A policy changed again since the early change: that change is not reported as
    # its own; the reconcile plans from the policy as it is.
    client.CustomObjectsApi(admin).patch_namespaced_custom_object(
        "spillover.clerum.io", "v1alpha1", namespace, "spilloverpolicies", "spillover",
        {"spec": {"enabled": True}},
    )  # fmt: skip
    again = reconcile_policy(cluster, namespace, "spillover", early=early, settings=SETTINGS)
    assert again.outcome == Outcome.APPLIED
    assert env_map(read_deployment(admin, namespace, "wrc"), "controller")[ENABLED_VAR] == "true"


def test_apply_change_touches_nothing_it_may_not(
    cluster: Connection, admin: client.ApiClient, namespace: str
) -> None:
    create_object(admin, _wrc(namespace, {}))
    create_object(
        admin, policy_manifest(namespace, {"enabled": False, "target": {"deployment": "wrc"}})
    )
    reader = ApiReader(cluster.in_namespace(namespace))
    someone_else = from_environ({ALLOWED_TARGETS_VAR: "someone-else"})
    assert apply_change(cluster, namespace, "spillover", reader, someone_else) is None
    dep = read_deployment(admin, namespace, "wrc")
    assert dep["metadata"]["generation"] == 1  # its spec never changed
    assert ENABLED_VAR not in env_map(dep, "controller")
    assert "status" not in read_policy(admin, namespace)


def test_apply_change_from_a_stale_copy_keeps_what_others_wrote_since(
    cluster: Connection, admin: client.ApiClient, namespace: str
) -> None:
    """The kill switch's first move goes without the resourceVersion precondition when
    it only sets values: planned from a copy older than the Deployment (an entry and a
    label added since), it is not refused, and what the other writer added stays."""
    from spillover_operator.client import Conflict, patch_deployment_env
    from spillover_operator.domain.envplan import plan_apply
    from spillover_operator.domain.policy import parse_spec
    from spillover_operator.domain.resolved_env import no_config_maps
    from spillover_operator.handlers import views

    applied = {ENABLED_VAR: "true", PASSTHROUGH_VAR: ALL_NAMES}
    create_object(admin, _wrc(namespace, applied))
    policy = create_object(
        admin, policy_manifest(namespace, {"enabled": False, "target": {"deployment": "wrc"}})
    )
    stale = read_deployment(admin, namespace, "wrc")
    client.AppsV1Api(admin).patch_namespaced_deployment(
        "wrc",
        namespace,
        {"metadata": {"labels": {"touched": "yes"}},
         "spec": {"template": {"spec": {"containers": [
            {"name": "controller", "env": [{"name": "ADDED_LATER", "value": "1"}]}
        ]}}}},
    )  # fmt: skip
    indexes = {
        views.POLICIES: {
            k: [v] for k, v in views.policy_entry(namespace, "spillover", policy).items()
        },
        views.DEPLOYMENTS: {(namespace, "wrc"): [stale]},
        views.BY_TARGET: {(namespace, "wrc"): ["spillover"]},
    }
    reader = views.IndexReader(namespace, indexes, cluster=cluster)
    plan = plan_apply(stale, parse_spec(policy["spec"]), config_maps=no_config_maps)
    assert plan.values_only
    with pytest.raises(Conflict):  # with the precondition: refused
        patch_deployment_env(cluster.in_namespace(namespace), "wrc", plan)
    early = apply_change(cluster, namespace, "spillover", reader, SETTINGS)
    assert early is not None
    after = read_deployment(admin, namespace, "wrc")
    env = env_map(after, "controller")
    assert env[ENABLED_VAR] == "false" and env["ADDED_LATER"] == "1"
    assert env[PASSTHROUGH_VAR] == ALL_NAMES
    assert after["metadata"]["labels"]["touched"] == "yes"


def test_a_change_the_refresh_reconcile_made_is_not_made_and_announced_again(
    cluster: Connection, admin: client.ApiClient, namespace: str
) -> None:
    """`spilloverctl restore --refresh-recipe-pods` writes the spec and the refresh
    request at once. kopf runs the refresh handler first: its reconcile applies the
    change (Applied). The spec handler's apply_change comes next, while kopf's copy of
    the Deployment may still be the one from before that patch: planned on it, the
    change looked not made, was sent again (changing nothing) and announced again, a
    second Applied Event for the same generation. The operator's own patch is newer
    than that copy: one Applied Event per generation."""
    from spillover_operator.domain.constants import REFRESH_REQUEST_ANNOTATION
    from spillover_operator.handlers import views

    killed = {ENABLED_VAR: "false", PASSTHROUGH_VAR: ALL_NAMES}
    create_object(admin, _wrc(namespace, killed))
    body = policy_manifest(namespace, {"enabled": True, "target": {"deployment": "wrc"}})
    body["metadata"]["annotations"] = {REFRESH_REQUEST_ANNOTATION: "2026-01-01T00:00:00 ab12"}
    policy = create_object(admin, body)
    before_patch = read_deployment(admin, namespace, "wrc")
    # What kopf's indexes hold, and keep holding: the watch event of the operator's
    # patch has not been handled yet.
    indexes = {
        views.POLICIES: {
            k: [v] for k, v in views.policy_entry(namespace, "spillover", policy).items()
        },
        views.DEPLOYMENTS: {(namespace, "wrc"): [before_patch]},
        views.BY_TARGET: {(namespace, "wrc"): ["spillover"]},
    }
    written: dict[Any, Any] = {}
    written_deployments: dict[Any, Any] = {}

    def reader() -> views.IndexReader:  # each handler builds its own, sharing the writes
        return views.IndexReader(
            namespace, indexes, cluster=cluster, written=written,
            written_deployments=written_deployments,
        )  # fmt: skip

    refreshed = reconcile_policy(cluster, namespace, "spillover", reader(), settings=SETTINGS)
    assert refreshed.outcome == Outcome.APPLIED, refreshed.message
    assert env_map(read_deployment(admin, namespace, "wrc"), "controller")[ENABLED_VAR] == "true"
    generation = read_deployment(admin, namespace, "wrc")["metadata"]["generation"]

    early = apply_change(cluster, namespace, "spillover", reader(), SETTINGS)
    reported = reconcile_policy(
        cluster, namespace, "spillover", reader(), early=early, settings=SETTINGS
    )
    # Both reconciles have returned, their Events posted: one Applied on each object.
    assert len(_events(admin, namespace, "spillover", "Applied")) == 1
    assert len(_events(admin, namespace, "wrc", "Applied")) == 1
    assert early is None  # nothing left to change: the change is made already
    assert reported.outcome == Outcome.IN_SYNC, reported.message
    assert read_deployment(admin, namespace, "wrc")["metadata"]["generation"] == generation


def test_the_api_reader_gives_the_policies_targeting_the_deployment_each_parsed(
    cluster: Connection, admin: client.ApiClient, namespace: str
) -> None:
    """`ApiReader.policies_targeting` lists the namespace's policies and parses only
    those targeting the Deployment asked about, as the index reader gives them."""
    for name, target in (("spillover", "wrc"), ("second", "wrc"), ("elsewhere", "other")):
        spec = {"enabled": False, "target": {"deployment": target}}
        create_object(admin, policy_manifest(namespace, spec, name=name))
    reader = ApiReader(cluster.in_namespace(namespace))
    found = reader.policies_targeting("wrc")
    assert sorted(p["metadata"]["name"] for p in found) == ["second", "spillover"]
    assert all(isinstance(p.spec, PolicySpec) and p.spec.deployment == "wrc" for p in found)
    assert [p["metadata"]["name"] for p in reader.policies_targeting("other")] == ["elsewhere"]
