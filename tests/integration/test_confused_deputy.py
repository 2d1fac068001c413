"""The confused-deputy attempt of issue 10, tried as a user would on the local control
plane: someone allowed to create SpilloverPolicies but not to patch Deployments points
`spec.target.deployment` at `payments-api`. It is refused three ways, each shown on its
own:

- RBAC: the manifests' Role lets the operator patch only the WRC Deployment, so even an
  operator told to allow payments-api gets 403 and changes nothing;
- admission: the manifests' ValidatingAdmissionPolicy refuses the policy, naming the field;
- operator: configured as the manifests configure it, it reports TargetNotAllowed and
  never touches payments-api.

And what the operator reports (status, Events, `spilloverctl status`) shows no more of
a Deployment than the spillover variables and MCP_HOST_ENV_PASSTHROUGH.

Every RBAC, admission and operator setting comes from `kubectl kustomize
manifests/overlays/dev`, as a platform team would apply it.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    condition,
    container_manifest,
    current,
    deployment_manifest,
    env_map,
    install_crd,
    is_ready,
    model,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client, config
from kubernetes.client import ApiException
from kustomize_build import OVERLAYS, build, container_env, find
from spillover_operator.allowlist import ALLOWED_TARGETS_VAR
from spillover_operator.cli.main import run
from spillover_operator.constants import (
    GROUP,
    PASSTHROUGH_VAR,
    PLURAL,
    REASON_TARGET_NOT_ALLOWED,
    THRESHOLD_VAR,
    VERSION,
)

pytestmark = pytest.mark.integration

WRC = "workflow-recipe-controller"
VICTIM = "payments-api"
SECRET = "hunter2"  # a value the policy does not concern: must never be reported
VAP = "spillover-allowed-targets"
STRATEGIC = "application/strategic-merge-patch+json"


# ---------------------------------------------------------------- objects and users


@pytest.fixture(scope="module")
def admin(control_plane: LocalCluster) -> Iterator[client.ApiClient]:
    api = control_plane.api_client()
    try:
        install_crd(api)
        yield api
    finally:
        api.close()


@pytest.fixture(scope="module")
def shipped() -> list[dict[str, Any]]:
    """The dev overlay, rendered as a platform team applies it."""
    return build(OVERLAYS / "dev")


def victim_body() -> dict[str, Any]:
    """payments-api: a Deployment nobody meant to hand to the operator."""
    env = {"DB_PASSWORD": SECRET, "LOG_LEVEL": "info"}
    return deployment_manifest(VICTIM, [container_manifest("api", "payments:1", env)])


def wrc_body(containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if containers is None:
        env = {"LOG_LEVEL": "info", PASSTHROUGH_VAR: "OPENAI_BASE_URL"}
        containers = [container_manifest("wrc", "registry.example/wrc:1.0", env)]
    return deployment_manifest(WRC, containers)


def settled(dep: dict[str, Any]) -> bool:
    """The Deployment controller is done with the current generation (no status writes
    pending), so its resourceVersion only moves if someone changes it."""
    status = dep.get("status") or {}
    conds = {c["type"]: c for c in status.get("conditions") or []}
    return bool(
        status.get("observedGeneration") == dep["metadata"]["generation"]
        and conds.get("Progressing", {}).get("reason") == "NewReplicaSetAvailable"
        and conds.get("Available", {}).get("status") == "True"
    )


@dataclass
class Deputy:
    """One test namespace: the admin, the policy author, the operator's RBAC."""

    namespace: str
    admin: client.ApiClient
    control_plane: LocalCluster
    shipped: list[dict[str, Any]]
    workdir: Path
    clients: list[client.ApiClient] = field(default_factory=list)
    operators: list[OperatorProcess] = field(default_factory=list)

    def connect(self, kubeconfig: Path) -> client.ApiClient:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        self.clients.append(api)
        return api

    def user(self, sa: str) -> client.ApiClient:
        """An API client with ServiceAccount `sa`'s RBAC (and nothing else)."""
        return self.connect(self.control_plane.service_account_kubeconfig(self.namespace, sa))

    def author(self) -> client.ApiClient:
        """The user of the issue: may create SpilloverPolicies, may only read
        Deployments."""
        core, rbac = client.CoreV1Api(self.admin), client.RbacAuthorizationV1Api(self.admin)
        core.create_namespaced_service_account(
            self.namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="author"))
        )
        role = {
            "metadata": {"name": "policy-author"},
            "rules": [
                {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["*"]},
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
            ],
        }
        rbac.create_namespaced_role(self.namespace, model(client.V1Role, role))
        binding = {
            "metadata": {"name": "policy-author"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "policy-author",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "author", "namespace": self.namespace}],
        }
        rbac.create_namespaced_role_binding(self.namespace, model(client.V1RoleBinding, binding))
        return self.user("author")

    def operator_rbac(self) -> Path:
        """The shipped ServiceAccount, Role and RoleBinding, moved into this namespace;
        a kubeconfig with the ServiceAccount's token."""
        sa = copy.deepcopy(find(self.shipped, "ServiceAccount", "spillover-operator"))
        role = copy.deepcopy(find(self.shipped, "Role", "spillover-operator"))
        binding = copy.deepcopy(find(self.shipped, "RoleBinding", "spillover-operator"))
        for obj in (sa, role, binding):
            obj["metadata"]["namespace"] = self.namespace
        binding["subjects"][0]["namespace"] = self.namespace
        client.CoreV1Api(self.admin).create_namespaced_service_account(
            self.namespace, model(client.V1ServiceAccount, sa)
        )
        rbac = client.RbacAuthorizationV1Api(self.admin)
        rbac.create_namespaced_role(self.namespace, model(client.V1Role, role))
        rbac.create_namespaced_role_binding(self.namespace, model(client.V1RoleBinding, binding))
        return Path(
            self.control_plane.service_account_kubeconfig(self.namespace, sa["metadata"]["name"])
        )

    def shipped_allow_list(self) -> str:
        operator = find(self.shipped, "Deployment", "spillover-operator")
        return str(container_env(operator, "operator")[ALLOWED_TARGETS_VAR])

    def start_operator(self, *, allowed_targets: str | None = None) -> OperatorProcess:
        """The real operator with the shipped RBAC and, unless told otherwise, the
        shipped SPILLOVER_ALLOWED_TARGETS."""
        op = OperatorProcess(
            self.namespace,
            self.operator_rbac(),
            self.workdir,
            resync_seconds=300,
            allowed_targets=allowed_targets or self.shipped_allow_list(),
        )
        self.operators.append(op)
        return op.start()

    def create_deployment(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create it and wait until its rollout is done (resourceVersion stable)."""
        client.AppsV1Api(self.admin).create_namespaced_deployment(
            self.namespace, model(client.V1Deployment, body)
        )
        name = body["metadata"]["name"]

        def done() -> dict[str, Any] | None:
            dep = self.deployment(name)
            return dep if settled(dep) else None

        return wait_for(f"Deployment {name} to settle", done)

    def deployment(self, name: str) -> dict[str, Any]:
        return read_deployment(self.admin, self.namespace, name)

    def create_policy(self, api: client.ApiClient, name: str, target: str, **spec: Any) -> None:
        body = policy_manifest(self.namespace, {**spec, "target": {"deployment": target}}, name)
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, body
        )

    def policy(self, name: str) -> dict[str, Any]:
        return read_policy(self.admin, self.namespace, name)

    def wait_reason(self, name: str, reason: str) -> dict[str, Any]:
        op = self.operators[-1] if self.operators else None

        def probe() -> dict[str, Any] | None:
            pol = self.policy(name)
            ok = current(pol) and condition(pol, "Ready").get("reason") == reason
            return pol if ok else None

        return wait_for(f"policy {name}: Ready reason {reason}", probe, operator=op)

    def wait_ready(self, name: str) -> dict[str, Any]:
        op = self.operators[-1] if self.operators else None

        def probe() -> dict[str, Any] | None:
            pol = self.policy(name)
            return pol if is_ready(pol) else None

        return wait_for(f"policy {name}: Ready=True", probe, operator=op)

    def events(self) -> list[dict[str, Any]]:
        raw: Any = client.CoreV1Api(self.admin).list_namespaced_event(
            self.namespace, _preload_content=False
        )
        return list(json.loads(raw.data)["items"])

    def events_about(self, kind: str, name: str, reason: str | None = None) -> list[Any]:
        return [
            e
            for e in self.events()
            if e["involvedObject"].get("kind") == kind
            and e["involvedObject"].get("name") == name
            and (reason is None or e.get("reason") == reason)
        ]


@pytest.fixture
def deputy(
    control_plane: LocalCluster,
    namespace: str,
    admin: client.ApiClient,
    shipped: list[dict[str, Any]],
    tmp_path: Path,
) -> Iterator[Deputy]:
    d = Deputy(namespace, admin, control_plane, shipped, tmp_path)
    try:
        yield d
    finally:
        for op in d.operators:
            op.stop()
        for api in d.clients:
            api.close()
        custom = client.CustomObjectsApi(admin)
        for item in _policies(custom, namespace):  # let the namespace go
            if item["metadata"].get("finalizers"):
                _patch_policy(
                    custom, namespace, item["metadata"]["name"], {"metadata": {"finalizers": None}}
                )


def _policies(custom: client.CustomObjectsApi, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )["items"]
    return items


def _patch_policy(
    custom: client.CustomObjectsApi, namespace: str, name: str, body: dict[str, Any]
) -> None:
    """A merge patch as the admin (the raw API: these are the attacker's/admin's calls,
    not the product's)."""
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)


def _policy_or_none(
    custom: client.CustomObjectsApi, namespace: str, name: str
) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def env_patch(name: str, value: str, container: str) -> dict[str, Any]:
    return {
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": container, "env": [{"name": name, "value": value}]}]
                }
            }
        }
    }


def by_operator(event: dict[str, Any]) -> bool:
    """Posted by the operator (its own Events or kopf's), not by the Deployment
    controller."""
    component = (event.get("source") or {}).get("component")
    return "spillover-operator" in (component, event.get("reportingComponent"))


def untouched(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Nobody wrote the Deployment at all, and the operator never managed a field."""
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"] == before["spec"]
    managers = {m.get("manager") for m in after["metadata"].get("managedFields") or []}
    assert "spillover-operator" not in managers


# ---------------------------------------------------------------- 1. RBAC


def test_rbac_the_shipped_role_lets_the_operator_patch_only_the_wrc(deputy: Deputy) -> None:
    deputy.create_deployment(wrc_body())
    before = deputy.create_deployment(victim_body())
    author = deputy.author()

    # The premise: the author may not patch payments-api.
    with pytest.raises(ApiException) as info:
        client.AppsV1Api(author).patch_namespaced_deployment(
            VICTIM, deputy.namespace, env_patch("X", "1", "api"), _content_type=STRATEGIC
        )
    assert info.value.status == 403

    # The shipped Role: patch payments-api refused, the WRC allowed, watching allowed.
    operator = client.AppsV1Api(deputy.connect(deputy.operator_rbac()))
    with pytest.raises(ApiException) as info:
        operator.patch_namespaced_deployment(
            VICTIM, deputy.namespace, env_patch("X", "1", "api"), _content_type=STRATEGIC
        )
    assert info.value.status == 403
    message = json.loads(info.value.body)["message"]
    assert f'deployments.apps "{VICTIM}" is forbidden' in message
    assert "system:serviceaccount:" in message and ":spillover-operator" in message
    operator.patch_namespaced_deployment(
        WRC, deputy.namespace, env_patch("X", "1", "wrc"), _content_type=STRATEGIC
    )
    names = {d.metadata.name for d in operator.list_namespaced_deployment(deputy.namespace).items}
    assert {WRC, VICTIM} <= names
    untouched(before, deputy.deployment(VICTIM))


def test_rbac_alone_stops_an_operator_told_to_allow_payments_api(deputy: Deputy) -> None:
    """Admission absent and the operator's allow-list wrongly widened: the Role still
    refuses, the policy says so (ApplyFailed, 403) and payments-api is untouched."""
    before = deputy.create_deployment(victim_body())
    deputy.start_operator(allowed_targets=f"{WRC},{VICTIM}")
    deputy.create_policy(deputy.author(), "sneaky", VICTIM)
    policy = deputy.wait_reason("sneaky", "ApplyFailed")
    message = condition(policy, "Ready")["message"]
    assert "403" in message and "forbidden" in message.lower()
    untouched(before, deputy.deployment(VICTIM))


# ---------------------------------------------------------------- 2. admission


def install_admission(deputy: Deputy) -> tuple[str, str]:
    """The shipped ConfigMap, ValidatingAdmissionPolicy and binding. The two
    admission objects are cluster-scoped and the control plane is shared by every
    test's namespace, so they get this namespace's name, the binding matches only this
    namespace and reads the ConfigMap from it; their rules are the shipped ones."""
    ns = deputy.namespace
    cm = copy.deepcopy(find(deputy.shipped, "ConfigMap", VAP))
    vap = copy.deepcopy(find(deputy.shipped, "ValidatingAdmissionPolicy", VAP))
    binding = copy.deepcopy(find(deputy.shipped, "ValidatingAdmissionPolicyBinding", VAP))
    cm["metadata"]["namespace"] = ns
    vap["metadata"]["name"] = binding["spec"]["policyName"] = f"{VAP}-{ns}"
    binding["metadata"]["name"] = f"{VAP}-{ns}"
    binding["spec"]["paramRef"]["namespace"] = ns
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    }
    client.CoreV1Api(deputy.admin).create_namespaced_config_map(ns, model(client.V1ConfigMap, cm))
    admission = client.AdmissionregistrationV1Api(deputy.admin)
    admission.create_validating_admission_policy(model(client.V1ValidatingAdmissionPolicy, vap))
    admission.create_validating_admission_policy_binding(
        model(client.V1ValidatingAdmissionPolicyBinding, binding)
    )
    return vap["metadata"]["name"], binding["metadata"]["name"]


def refusal(api: client.ApiClient, deputy: Deputy, target: str) -> ApiException | None:
    """The API server's answer to a dry-run create of a policy targeting `target`:
    the refusal, or None if it would be admitted (nothing is stored either way)."""
    body = policy_manifest(deputy.namespace, {"target": {"deployment": target}}, "probe")
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, deputy.namespace, PLURAL, body, dry_run="All"
        )
    except ApiException as exc:
        return exc
    return None


def test_admission_refuses_the_policy_naming_the_field(deputy: Deputy) -> None:
    author = deputy.author()
    custom = client.CustomObjectsApi(author)
    # Stored before admission existed: must stay deletable afterwards.
    deputy.create_policy(author, "older", VICTIM)
    vap_name, binding_name = install_admission(deputy)
    admission = client.AdmissionregistrationV1Api(deputy.admin)
    try:

        def type_checked() -> dict[str, Any] | None:
            raw: Any = admission.read_validating_admission_policy(vap_name, _preload_content=False)
            vap: dict[str, Any] = json.loads(raw.data)
            status = vap.get("status") or {}
            done = status.get("observedGeneration") == vap["metadata"]["generation"]
            return status if done else None

        status = wait_for("the admission policy to be type-checked", type_checked)
        assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
        # The policy is loaded asynchronously: poll until it is enforced.
        refused = wait_for(
            "the admission policy to refuse payments-api",
            lambda: refusal(author, deputy, VICTIM),
        )
        assert refusal(author, deputy, WRC) is None

        deputy.create_policy(author, "spillover", WRC)  # admitted
        with pytest.raises(ApiException) as info:
            deputy.create_policy(author, "sneaky", VICTIM)
        for exc in (refused, info.value):
            assert exc.status == 403
            message = json.loads(exc.body)["message"]
            assert "spec.target.deployment: Deployment payments-api is not one" in message
            assert "allowed: workflow-recipe-controller." in message
        assert _policy_or_none(custom, deputy.namespace, "sneaky") is None

        # Retargeting an admitted policy is a spec change: checked too.
        with pytest.raises(ApiException) as info:
            _patch_policy(
                custom, deputy.namespace, "spillover", {"spec": {"target": {"deployment": VICTIM}}}
            )
        assert "spec.target.deployment" in str(info.value.body)
        assert deputy.policy("spillover")["spec"]["target"]["deployment"] == WRC

        # The older policy: its spec may not change, its metadata may, deleting works.
        with pytest.raises(ApiException):
            _patch_policy(custom, deputy.namespace, "older", {"spec": {"enabled": False}})
        _patch_policy(custom, deputy.namespace, "older", {"metadata": {"labels": {"a": "b"}}})
        custom.delete_namespaced_custom_object(GROUP, VERSION, deputy.namespace, PLURAL, "older")
        assert _policy_or_none(custom, deputy.namespace, "older") is None
    finally:
        admission.delete_validating_admission_policy_binding(binding_name)
        admission.delete_validating_admission_policy(vap_name)


# ---------------------------------------------------------------- 3. the operator


def test_operator_refuses_a_target_outside_its_allow_list_touching_nothing(
    deputy: Deputy,
) -> None:
    deputy.create_deployment(wrc_body())
    before = deputy.create_deployment(victim_body())
    op = deputy.start_operator()  # the shipped RBAC and SPILLOVER_ALLOWED_TARGETS
    author = deputy.author()
    deputy.create_policy(author, "sneaky", VICTIM)

    policy = deputy.wait_reason("sneaky", REASON_TARGET_NOT_ALLOWED)
    message = condition(policy, "Ready")["message"]
    assert message.startswith("spec.target.deployment: Deployment 'payments-api' is not one")
    assert f"allowed: {WRC} (the operator's {ALLOWED_TARGETS_VAR})" in message
    assert condition(policy, "Applied")["status"] == "False"
    assert "effective" not in policy["status"] and "rollout" not in policy["status"]

    # The operator still works for the allowed target (and has moved past the refusal).
    deputy.create_policy(author, "spillover", WRC)
    deputy.wait_ready("spillover")

    untouched(before, deputy.deployment(VICTIM))
    warnings = deputy.events_about("SpilloverPolicy", "sneaky", REASON_TARGET_NOT_ALLOWED)
    assert len(warnings) == 1, warnings
    assert warnings[0]["type"] == "Warning" and warnings[0]["message"] == message
    assert [e for e in deputy.events_about("Deployment", VICTIM) if by_operator(e)] == []
    assert op.metric("spillover_operator_reconcile_total", result="target_not_allowed") >= 1
    assert SECRET not in json.dumps(deputy.policy("sneaky"))


# ---------------------------------------------------------------- 4. what is reported


def test_status_events_and_spilloverctl_show_only_the_spillover_variables(
    deputy: Deputy,
) -> None:
    wrc_env = [
        {"name": "DB_PASSWORD", "value": SECRET},
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "wrc", "key": "api-key"}}},
        {"name": PASSTHROUGH_VAR, "value": "OPENAI_BASE_URL"},
    ]
    containers = [
        container_manifest("wrc", "registry.example/wrc:1.0", wrc_env),
        container_manifest("proxy", "registry.example/proxy:1.0", {"PROXY_TOKEN": "s3cr3t"}),
    ]
    deputy.create_deployment(wrc_body(containers))
    op = deputy.start_operator()
    deputy.create_policy(deputy.author(), "spillover", WRC, thresholdBytes=32768)
    deputy.wait_ready("spillover")

    # A hand edit of a spillover variable and of a secret: DriftCorrected.
    patch = env_patch(THRESHOLD_VAR, "65536", "wrc")
    patch["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "DB_PASSWORD", "value": "hunter3"}
    )
    client.AppsV1Api(deputy.admin).patch_namespaced_deployment(
        WRC, deputy.namespace, patch, _content_type=STRATEGIC
    )
    wait_for(
        "the DriftCorrected Event",
        lambda: deputy.events_about("SpilloverPolicy", "spillover", "DriftCorrected"),
        operator=op,
    )
    policy = deputy.wait_ready("spillover")
    assert env_map(deputy.deployment(WRC), "wrc")["DB_PASSWORD"] == "hunter3"  # not ours
    assert set(policy["status"]["effective"]) <= {
        "enabled",
        "thresholdBytes",
        "budgetBytes",
        "passthrough",
    }
    outputs = []
    for argv in (["status"], ["status", "-o", "json"]):
        out, err = io.StringIO(), io.StringIO()
        run(
            ["--kubeconfig", str(deputy.control_plane.kubeconfig), "-n", deputy.namespace, *argv],
            stdout=out,
            stderr=err,
        )
        outputs.append(out.getvalue() + err.getvalue())
    assert "32768" in outputs[0]  # the command did report

    # A wrong container: the message names containers, never their env.
    _patch_policy(
        client.CustomObjectsApi(deputy.admin),
        deputy.namespace,
        "spillover",
        {"spec": {"target": {"container": "nope"}}},
    )
    deputy.wait_reason("spillover", "TargetNotFound")

    reported = {
        "policy when Ready": json.dumps(policy),
        "policy when TargetNotFound": json.dumps(deputy.policy("spillover")),
        "events": json.dumps(deputy.events()),
        "spilloverctl status": outputs[0],
        "spilloverctl status -o json": outputs[1],
        "operator log": op.log_path.read_text(errors="replace"),
    }
    for where, text in reported.items():
        for leak in (SECRET, "hunter3", "DB_PASSWORD", "API_KEY", "s3cr3t", "PROXY_TOKEN"):
            assert leak not in text, f"{leak!r} shown in the {where}"
