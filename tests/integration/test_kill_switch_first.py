"""The kill switch first (issue 28, item 1), on the local control plane with real RBAC
and the shipped admission policies: `spilloverctl kill` turns spillover OFF whatever
optional part it was asked for cannot be done. One test per combination of missing
rights, each run as a user with exactly those rights (a client certificate, so the API
server authenticates them), in-process as the console script runs and through the make
targets:

- no verb `refresh` (`--refresh-recipe-pods`, with and without `--reason`);
- the change record refused by admission (`--reason`);
- no SelfSubjectReview (`--reason`: who you are cannot be learned);
- no read of the Deployment (`--wait` through the operator);
- no list of the pods (`--direct --wait`);
- no patch of the recipe workloads (`--direct --refresh-recipe-pods`).

Each ends with the policy at `enabled: false` (and, with `--direct`, the WRC env OFF),
exit 11 naming what was not done, and what to do. `restore` and `set` stay all or
nothing: their refused extras leave the policy as it was (exit 5)."""

from __future__ import annotations

import copy
import io
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from admission_helpers import enforced, refusing_policy, shipped_for_namespace
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    container_manifest,
    create_object,
    deployment_manifest,
    env_map,
    model,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kubernetes import client
from kubernetes.client import ApiException
from kustomize_build import OVERLAYS, build
from repo_paths import REPO_ROOT
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.domain.change_record import decode
from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION, REFRESH_REQUEST_ANNOTATION
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

WRC = "wrc"
RECIPE = "mcp-host-r1"
USER = "oncall"
ENGAGED = "the kill switch is ENGAGED"

POLICY_RW = {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "patch"]}
REFRESH_VERB = {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["refresh"]}
READ_DEPLOYMENTS = {
    "apiGroups": ["apps"],
    "resources": ["deployments", "replicasets"],
    "verbs": ["get", "list", "watch"],
}
PATCH_WRC = {
    "apiGroups": ["apps"],
    "resources": ["deployments"],
    "verbs": ["patch"],
    "resourceNames": [WRC],
}
READ_PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}


@pytest.fixture(scope="module")
def shipped() -> list[dict[str, Any]]:
    """The dev overlay, rendered as a platform team applies it."""
    return build(OVERLAYS / "dev")


@pytest.fixture
def workloads(admin: client.ApiClient, namespace: str) -> Iterator[None]:
    """The WRC and one recipe mcp-host Deployment, both rolled out with spillover ON,
    and the policy (enabled)."""
    on = {ENABLED_VAR: "true", PASSTHROUGH_VAR: ENABLED_VAR}
    create_object(
        admin,
        deployment_manifest(
            WRC, [container_manifest("controller", "example.invalid/wrc:1", on)],
            namespace=namespace,
        ),
    )  # fmt: skip
    create_object(
        admin,
        deployment_manifest(
            RECIPE,
            [container_manifest("mcp-host", "example.invalid/mcp-host:1", {ENABLED_VAR: "true"})],
            namespace=namespace,
            labels={"app.kubernetes.io/name": "mcp-host", "recipe": "r1"},
        ),
    )
    for name in (WRC, RECIPE):
        wait_for(f"{name} to roll out", lambda name=name: rolled_out(admin, namespace, name))
    create_object(
        admin, policy_manifest(namespace, {"enabled": True, "target": {"deployment": WRC}})
    )
    yield


def rolled_out(api: client.ApiClient, namespace: str, name: str) -> bool:
    dep = read_deployment(api, namespace, name)
    status = dep.get("status") or {}
    want = dep["spec"].get("replicas", 1)
    return bool(
        status.get("observedGeneration") == dep["metadata"]["generation"]
        and status.get("updatedReplicas") == want
        and status.get("availableReplicas") == want
    )


def user_with(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    *rules: dict[str, Any],
    name: str = USER,
) -> Path:
    """A person's kubeconfig (client certificate, CN `name`) with exactly `rules` in
    `namespace`; returned once the authorizer grants the first rule's first verb."""
    rbac = client.RbacAuthorizationV1Api(admin)
    role = {"metadata": {"name": name}, "rules": list(rules)}
    rbac.create_namespaced_role(namespace, model(client.V1Role, role))
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    rbac.create_namespaced_role_binding(namespace, model(client.V1RoleBinding, binding))
    wait_allowed(admin, namespace, name, rules[0])
    return control_plane.user_kubeconfig(name)


def grant(admin: client.ApiClient, namespace: str, name: str, rule: dict[str, Any]) -> None:
    """Add `rule` to `name`'s Role; return once the authorizer grants it."""
    rbac = client.RbacAuthorizationV1Api(admin)
    role = rbac.read_namespaced_role(name, namespace)
    role.rules.append(model(client.V1PolicyRule, rule))
    rbac.replace_namespaced_role(name, namespace, role)
    wait_allowed(admin, namespace, name, rule)


def wait_allowed(admin: client.ApiClient, namespace: str, user: str, rule: dict[str, Any]) -> None:
    """RBAC is read from an informer: wait until `rule`'s first verb is granted."""
    attributes = {
        "namespace": namespace,
        "group": rule["apiGroups"][0],
        "resource": rule["resources"][0],
        "verb": rule["verbs"][0],
    }
    if rule.get("resourceNames"):
        attributes["name"] = rule["resourceNames"][0]
    review = {"spec": {"user": user, "resourceAttributes": attributes}}
    auth = client.AuthorizationV1Api(admin)
    wait_for(
        f"{user} granted {attributes}",
        lambda: (
            auth.create_subject_access_review(
                model(client.V1SubjectAccessReview, review)
            ).status.allowed
        ),
    )


def ctl(kubeconfig: Path, namespace: str, *argv: str) -> tuple[int, str, str]:
    """spilloverctl in-process, exactly as the console script runs it."""
    out, err = io.StringIO(), io.StringIO()
    code = run(["--kubeconfig", str(kubeconfig), "-n", namespace, *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def make(
    kubeconfig: Path, namespace: str, target: str, flags: str, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    """A kill-switch make target, as a user runs it (KUBECONFIG names who they are)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        ["make", "--no-print-directory", target, f"NAMESPACE={namespace}", f"TIMEOUT={timeout}",
         f"SPILLOVERCTL_FLAGS={flags}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def policy(admin: client.ApiClient, namespace: str) -> dict[str, Any]:
    return read_policy(admin, namespace, "spillover")


def annotations(admin: client.ApiClient, namespace: str) -> dict[str, str]:
    return policy(admin, namespace)["metadata"].get("annotations") or {}


def enabled(admin: client.ApiClient, namespace: str) -> bool:
    return bool(policy(admin, namespace)["spec"]["enabled"])


def wrc_enabled(admin: client.ApiClient, namespace: str) -> str | None:
    return env_map(read_deployment(admin, namespace, WRC), "controller").get(ENABLED_VAR)


def set_enabled(admin: client.ApiClient, namespace: str, value: bool) -> None:
    client.CustomObjectsApi(admin).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "spillover", {"spec": {"enabled": value}}
    )


def refused_dry_run(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> bool:
    """Whether admission refuses `body` as a patch of the policy (a dry run)."""
    try:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "spillover", body, dry_run="All"
        )
    except ApiException as exc:
        return exc.status == 403
    return False


def as_user(kubeconfig: Path) -> client.ApiClient:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def refresh_admission(
    admin: client.ApiClient, namespace: str, shipped: list[dict[str, Any]], user: Path
) -> Any:
    """The shipped spillover-refresh-request policy for this namespace, enforced."""
    vap, binding = shipped_for_namespace(shipped, "spillover-refresh-request", namespace)
    api = as_user(user)
    probe = {"metadata": {"annotations": {REFRESH_REQUEST_ANNOTATION: "probe"}}}
    return enforced(admin, vap, binding, lambda: refused_dry_run(api, namespace, probe))


def assert_engaged(code: int, err: str, flag: str) -> None:
    assert code == exit_codes.EXTRA_REFUSED, err
    assert f"spilloverctl: {flag} not done:" in err
    assert ENGAGED in err.splitlines()[-1]
    assert f"not done: {flag}" in err.splitlines()[-1]
    assert "Traceback" not in err


# ------------------------------------------------------------------------------- tests


@pytest.mark.usefixtures("workloads")
@pytest.mark.parametrize("reason", [(), ("--reason", "INC-7 spill storm")], ids=["", "reason"])
def test_kill_without_the_refresh_verb_turns_spillover_off_and_exits_11(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    shipped: list[dict[str, Any]],
    reason: tuple[str, ...],
) -> None:
    oncall = user_with(control_plane, admin, namespace, POLICY_RW)
    with refresh_admission(admin, namespace, shipped, oncall):
        code, out, err = ctl(oncall, namespace, "kill", "--refresh-recipe-pods", *reason)
        assert_engaged(code, err, "--refresh-recipe-pods")
        assert enabled(admin, namespace) is False
        assert REFRESH_REQUEST_ANNOTATION not in annotations(admin, namespace)
        assert "the refresh request was refused" in err
        assert "may not request a refresh" in err  # the API server's own words
        assert "spillover-recipe-pods-refresher" in err  # what to do
        assert "refresh of the recipe pods requested" not in out
        if reason:
            record = decode(annotations(admin, namespace)[CHANGE_RECORD_ANNOTATION])
            assert (record.user, record.reason) == (USER, "INC-7 spill storm")

        # restore stays all or nothing: the same refusal changes nothing.
        code, out, err = ctl(oncall, namespace, "restore", "--refresh-recipe-pods", *reason)
        assert code == exit_codes.API, out + err
        assert enabled(admin, namespace) is False

        # Granted the verb, the same command does both: the test can tell them apart.
        set_enabled(admin, namespace, True)
        grant(admin, namespace, USER, REFRESH_VERB)
        api = as_user(oncall)
        probe = {"metadata": {"annotations": {REFRESH_REQUEST_ANNOTATION: "granted"}}}
        wait_for("the refresh verb granted", lambda: not refused_dry_run(api, namespace, probe))
        code, out, err = ctl(oncall, namespace, "kill", "--refresh-recipe-pods", *reason)
        assert code == exit_codes.OK, out + err
        assert enabled(admin, namespace) is False
        assert REFRESH_REQUEST_ANNOTATION in annotations(admin, namespace)
        assert "refresh of the recipe pods requested" in out


@pytest.mark.usefixtures("workloads")
def test_kill_with_its_change_record_refused_writes_the_switch_without_it(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    shipped: list[dict[str, Any]],
) -> None:
    """The shipped change-record policy admits the record; one more policy here refuses
    every record (a platform that takes none), so only the spec can be written."""
    oncall = user_with(control_plane, admin, namespace, POLICY_RW)
    name = f"no-change-records-{namespace}"
    vap, binding = refusing_policy(
        name,
        group=GROUP,
        resource=PLURAL,
        operations=["UPDATE"],
        condition=(
            f"object.metadata.namespace == '{namespace}' && has(object.metadata.annotations)"
            f" && '{CHANGE_RECORD_ANNOTATION}' in object.metadata.annotations"
        ),
        message="change records are not taken in this namespace",
    )
    probe = {"metadata": {"annotations": {CHANGE_RECORD_ANNOTATION: "probe"}}}
    with enforced(admin, vap, binding, lambda: refused_dry_run(admin, namespace, probe)):
        code, out, err = ctl(oncall, namespace, "kill", "--reason", "INC-8")
        assert_engaged(code, err, "--reason")
        assert "the change record was refused" in err
        assert "change records are not taken in this namespace" in err
        assert enabled(admin, namespace) is False
        assert CHANGE_RECORD_ANNOTATION not in annotations(admin, namespace)

        # restore with --reason: all or nothing.
        code, out, err = ctl(oncall, namespace, "restore", "--reason", "INC-8 over")
        assert code == exit_codes.API, out + err
        assert enabled(admin, namespace) is False

        # kill without --reason: the record was not asked for, so its refusal is a note.
        set_enabled(admin, namespace, True)
        code, out, err = ctl(oncall, namespace, "kill")
        assert code == exit_codes.OK, out + err
        assert "change record refused" in out
        assert enabled(admin, namespace) is False


@contextmanager
def no_self_reviews(admin: client.ApiClient) -> Iterator[None]:
    """Nobody but system:masters may make a SelfSubjectReview, as on a cluster that
    took the verb away: the bootstrap ClusterRole system:basic-user (bound to every
    authenticated user) loses its selfsubjectreviews rule, put back on exit. The
    control plane is shared, so this holds only for the length of one test."""
    rbac = client.RbacAuthorizationV1Api(admin)
    role = rbac.read_cluster_role("system:basic-user")
    kept = copy.deepcopy(role.rules)
    role.rules = [
        r
        for r in role.rules
        if not (r.api_groups == ["authentication.k8s.io"] and "selfsubjectreviews" in r.resources)
    ]
    assert len(role.rules) < len(kept), "system:basic-user grants no selfsubjectreviews here"
    rbac.replace_cluster_role("system:basic-user", role)
    try:
        yield
    finally:
        role = rbac.read_cluster_role("system:basic-user")
        role.rules = kept
        rbac.replace_cluster_role("system:basic-user", role)


@pytest.mark.usefixtures("workloads")
def test_kill_reason_without_a_self_review_goes_ahead_without_the_record(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    """Who you are is asked with a SelfSubjectReview; a cluster may refuse it."""
    oncall = user_with(control_plane, admin, namespace, POLICY_RW)
    api = as_user(oncall)

    def self_review_refused() -> bool:
        try:
            client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
        except ApiException as exc:
            return exc.status == 403
        return False

    with no_self_reviews(admin):
        wait_for("SelfSubjectReviews refused", self_review_refused)
        code, _out, err = ctl(oncall, namespace, "kill", "--reason", "INC-9")
        assert_engaged(code, err, "--reason")
        assert "cannot learn who you are" in err
        assert enabled(admin, namespace) is False
        assert CHANGE_RECORD_ANNOTATION not in annotations(admin, namespace)

        # set with --reason: all or nothing.
        code, out, err = ctl(oncall, namespace, "set", "--threshold", "32768", "--reason", "x")
        assert code == exit_codes.API, out + err
        assert "nothing was changed" in err
        assert "thresholdBytes" not in policy(admin, namespace)["spec"]
    wait_for("SelfSubjectReviews allowed again", lambda: not self_review_refused())


@pytest.mark.usefixtures("workloads")
def test_kill_wait_without_reading_the_deployment_says_the_switch_is_on(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    oncall = user_with(control_plane, admin, namespace, POLICY_RW)
    code, _out, err = ctl(oncall, namespace, "kill", "--wait", "--timeout", "120")
    assert_engaged(code, err, "--wait")
    assert "could not follow the change" in err
    assert "may not get deployments" in err
    assert enabled(admin, namespace) is False


@pytest.mark.usefixtures("workloads")
def test_direct_kill_wait_without_listing_pods_is_not_done_with_the_pods(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    oncall = user_with(control_plane, admin, namespace, POLICY_RW, READ_DEPLOYMENTS, PATCH_WRC)
    code, out, err = ctl(oncall, namespace, "kill", "--direct", "--wait", "--timeout", "120")
    assert_engaged(code, err, "--wait")
    assert "the recipe mcp-host pods could not be checked" in err
    assert "--no-wait-recipe-pods" in err  # what to do
    assert "rollout is complete" in out  # the WRC part of the wait was done
    assert enabled(admin, namespace) is False
    assert wrc_enabled(admin, namespace) == "false"


@pytest.mark.usefixtures("workloads")
def test_direct_kill_refresh_without_patching_recipe_workloads_keeps_the_switch(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    rules = (POLICY_RW, READ_DEPLOYMENTS, PATCH_WRC, READ_PODS)
    oncall = user_with(control_plane, admin, namespace, *rules)
    code, _out, err = ctl(
        oncall, namespace, "kill", "--direct", "--refresh-recipe-pods", "--timeout", "120"
    )
    assert_engaged(code, err, "--refresh-recipe-pods")
    assert "the recipe pods were not refreshed" in err
    assert "may not patch deployments" in err
    assert enabled(admin, namespace) is False
    assert wrc_enabled(admin, namespace) == "false"
    recipe = read_deployment(admin, namespace, RECIPE)
    assert recipe["metadata"]["generation"] == 1  # not restarted


@pytest.mark.usefixtures("workloads")
def test_make_targets_engage_the_switch_when_an_extra_is_refused(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    shipped: list[dict[str, Any]],
) -> None:
    """`make kill-switch-engage` and `-direct` with `SPILLOVERCTL_FLAGS` as the runbook
    suggests: make reports spilloverctl's exit code 11, the switch is on."""
    oncall = user_with(control_plane, admin, namespace, POLICY_RW)
    with refresh_admission(admin, namespace, shipped, oncall):
        done = make(
            oncall, namespace, "kill-switch-engage", "--refresh-recipe-pods --reason INC-10"
        )
    assert done.returncode != 0
    assert "Error 11" in done.stderr, done.stdout + done.stderr
    assert "--refresh-recipe-pods not done" in done.stderr
    assert enabled(admin, namespace) is False

    set_enabled(admin, namespace, True)
    for rule in (READ_DEPLOYMENTS, PATCH_WRC, READ_PODS):
        grant(admin, namespace, USER, rule)
    # Its --wait then waits for the recipe pod nobody restarted: until TIMEOUT, exit 11.
    done = make(oncall, namespace, "kill-switch-engage-direct", "--refresh-recipe-pods", 15)
    assert "Error 11" in done.stderr, done.stdout + done.stderr
    assert "the recipe pods were not refreshed" in done.stderr
    assert enabled(admin, namespace) is False
    assert wrc_enabled(admin, namespace) == "false"
