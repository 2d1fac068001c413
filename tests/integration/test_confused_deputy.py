"""The confused-deputy attempt of issue 10, tried as a user would on the local control
plane: someone allowed to create SpilloverPolicies but not to patch Deployments points
`spec.target.deployment` at `payments-api`. It is refused three ways, each shown on its
own:

- RBAC: the manifests' Role lets the operator patch only the WRC Deployment, and with
  refresh opted in the refresh Role only the recipe workloads the ConfigMap lists, so
  even an operator told to allow payments-api gets RBAC's 403 and changes nothing;
  with those names taken away (a Role widened by mistake), the admission policy
  spillover-operator-writes still refuses the operator's write to anything the
  ConfigMap does not list;
- admission: the manifests' ValidatingAdmissionPolicy refuses the policy, naming the field;
- operator: configured as the manifests configure it, it reports TargetNotAllowed and
  never touches payments-api.

The refresh of recipe pods (issue 19): a user "alice" who may only create and patch
SpilloverPolicies sets `spec.recipePods.selector` to someone else's pods (`app=ledger`,
`app=payments-db`) or asks for a refresh by annotation. Refused three ways too:

- RBAC and admission, each shown alone: refresh permissions are an opt-in component
  whose Role may patch only the recipe workloads the allow-list names and never delete
  pods (`kubectl auth can-i`, SubjectAccessReviews and real requests as the operator's
  ServiceAccount, no admission policy installed), and the admission policy
  spillover-operator-writes admits the operator's patches only to those workloads,
  however many, when the Role's names are taken away (real requests);
- admission: alice (impersonated) cannot store a selector, a refresh mode or a refresh
  request the platform team did not allow, and the CRD refuses malformed selectors;
- operator: with RBAC widened by mistake, it restarts and deletes nothing outside its
  refresh allow-list (RecipePodsRefreshForbidden).

And what the operator reports (status, Events, `spilloverctl status`) shows no more of
a Deployment than the spillover variables and MCP_HOST_ENV_PASSTHROUGH.

Every RBAC, admission and operator setting comes from `kubectl kustomize
manifests/overlays/dev`, as a platform team would apply it.
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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
from kubernetes import client, config
from kubernetes.client import ApiException
from kustomize_build import OVERLAYS, build, container_env, find, kubectl
from spillover_operator.cli.main import run
from spillover_operator.client import selector_string
from spillover_operator.domain.allowlist import ALLOWED_TARGETS_VAR
from spillover_operator.domain.constants import REFRESH_REQUEST_ANNOTATION
from spillover_operator.domain.model import (
    PASSTHROUGH_VAR,
    REASON_TARGET_NOT_ALLOWED,
    THRESHOLD_VAR,
)
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

WRC = "workflow-recipe-controller"
VICTIM = "payments-api"
SECRET = "hunter2"  # a value the policy does not concern: must never be reported
VAP = "spillover-allowed-targets"
REFRESH_VAP = "spillover-refresh-request"
WRITES_VAP = "spillover-operator-writes"
# The operator's identity as the shipped policies name it (its ServiceAccount in
# spillover-system); the tests' operator runs as the ServiceAccount of its namespace.
SHIPPED_OPERATOR = "system:serviceaccount:spillover-system:spillover-operator"
REFRESH_ROLE = "spillover-operator-refresh"
REFRESHER = "spillover-recipe-pods-refresher"
REFRESH_COMPONENT = OVERLAYS.parent / "components" / "recipe-pods-refresh"
STRATEGIC = "application/strategic-merge-patch+json"


# ---------------------------------------------------------------- objects and users


@pytest.fixture(scope="module")
def shipped() -> list[dict[str, Any]]:
    """The dev overlay, rendered as a platform team applies it."""
    return build(OVERLAYS / "dev")


# The recipe Deployments the opted-in overlay names: one list in the ConfigMap.
RECIPES = ("mcp-host-r1", "mcp-host-r2", "mcp-host-r3")
RECIPE = RECIPES[0]
LEDGER, PAYMENTS_DB = "ledger", "payments-db"


@pytest.fixture(scope="module")
def opted_in(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The dev overlay with refresh opted in as manifests/README.md shows: the recipe
    literals in the ConfigMap (three recipe Deployments in one list, no StatefulSet)
    and components/recipe-pods-refresh."""
    dev = (OVERLAYS / "dev" / "kustomization.yaml").read_text()
    anchor = "      - deployments=workflow-recipe-controller\n"
    component = "  - ../../components/allowed-targets\n"
    overlay = tmp_path_factory.mktemp("refresh")
    text = dev.replace(
        anchor,
        anchor + f"      - recipeDeployments={','.join(RECIPES)}\n      - recipeRefresh=Always\n",
    )
    text = text.replace(component, component + "  - ../../components/recipe-pods-refresh\n")
    text = text.replace("../../", f"{os.path.relpath(OVERLAYS.parent, overlay)}/")
    (overlay / "kustomization.yaml").write_text(text)
    return build(overlay)


# The refresh Role as base shipped it before issue 19: what "RBAC widened by mistake"
# looks like.
WIDE_REFRESH_ROLE: dict[str, Any] = {
    "metadata": {"name": "spillover-operator-refresh"},
    "rules": [
        {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
    ],
}


# What the operator's refresh RBAC is in a test: none, the component's build, the
# component's Role without names, the old wide Role.
Refresh = Literal["none", "opted-in", "unnamed", "wide"]


def unnamed_refresh_role() -> dict[str, Any]:
    """The component's refresh Role with its names taken away (RBAC widened by mistake:
    a rule without resourceNames names every Deployment, every StatefulSet)."""
    role: dict[str, Any] = yaml.safe_load((REFRESH_COMPONENT / "role-refresh.yaml").read_text())
    for rule in role["rules"]:
        del rule["resourceNames"]
    return role


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

    def operator_rbac(self, refresh: Refresh = "none", *, opted_in: Any = None) -> Path:
        """The shipped ServiceAccount, Role and RoleBinding, moved into this namespace;
        with `refresh` "opted-in" also the refresh Role and binding of the opted-in
        build (`opted_in`), "unnamed" that binding to the component's Role with its
        names taken away (unnamed_refresh_role), "wide" to WIDE_REFRESH_ROLE. A
        kubeconfig with the ServiceAccount's token."""
        sa = copy.deepcopy(find(self.shipped, "ServiceAccount", "spillover-operator"))
        role = copy.deepcopy(find(self.shipped, "Role", "spillover-operator"))
        binding = copy.deepcopy(find(self.shipped, "RoleBinding", "spillover-operator"))
        roles, bindings = [role], [binding]
        if refresh != "none":
            source = opted_in if opted_in is not None else self.shipped
            refresh_binding = copy.deepcopy(find(source, "RoleBinding", REFRESH_ROLE))
            refresh_role = {
                "opted-in": lambda: copy.deepcopy(find(source, "Role", REFRESH_ROLE)),
                "unnamed": unnamed_refresh_role,
                "wide": lambda: copy.deepcopy(WIDE_REFRESH_ROLE),
            }[refresh]()
            roles.append(refresh_role)
            bindings.append(refresh_binding)
        for obj in (sa, *roles, *bindings):
            obj["metadata"]["namespace"] = self.namespace
        for b in bindings:
            b["subjects"][0]["namespace"] = self.namespace
        client.CoreV1Api(self.admin).create_namespaced_service_account(
            self.namespace, model(client.V1ServiceAccount, sa)
        )
        rbac = client.RbacAuthorizationV1Api(self.admin)
        for r in roles:
            rbac.create_namespaced_role(self.namespace, model(client.V1Role, r))
        for b in bindings:
            rbac.create_namespaced_role_binding(self.namespace, model(client.V1RoleBinding, b))
        return Path(
            self.control_plane.service_account_kubeconfig(self.namespace, sa["metadata"]["name"])
        )

    def operator_may(self, verb: str, resource: str, name: str | None, group: str = "") -> bool:
        """A SubjectAccessReview as the operator's ServiceAccount (what its Roles allow,
        decided by the API server's RBAC authorizer)."""
        attributes: dict[str, Any] = {
            "namespace": self.namespace,
            "verb": verb,
            "group": group,
            "resource": resource,
        }
        if name is not None:
            attributes["name"] = name
        review = {
            "spec": {
                "user": f"system:serviceaccount:{self.namespace}:spillover-operator",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{self.namespace}"],
                "resourceAttributes": attributes,
            }
        }
        answer = client.AuthorizationV1Api(self.admin).create_subject_access_review(
            model(client.V1SubjectAccessReview, review)
        )
        return bool(answer.status.allowed)

    def alice(self, *, refresher: bool = False) -> client.ApiClient:
        """The user of issue 19, impersonated by the admin: may get, list, create and
        patch SpilloverPolicies in this namespace (explicit verbs, no `*`), nothing else;
        `refresher`: also bound to the shipped ClusterRole spillover-recipe-pods-refresher."""
        rbac = client.RbacAuthorizationV1Api(self.admin)
        role = {
            "metadata": {"name": "alice"},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": [PLURAL],
                    "verbs": ["get", "list", "create", "patch"],
                }
            ],
        }
        rbac.create_namespaced_role(self.namespace, model(client.V1Role, role))
        self.bind("alice", "Role", "alice")
        if refresher:
            self.grant_refresh("alice")
        api = self.control_plane.api_client()
        api.set_default_header("Impersonate-User", "alice")
        self.clients.append(api)
        return api

    def bind(self, user: str, kind: str, name: str) -> None:
        binding = {
            "metadata": {"name": f"{user}-{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        }
        client.RbacAuthorizationV1Api(self.admin).create_namespaced_role_binding(
            self.namespace, model(client.V1RoleBinding, binding)
        )

    def grant_refresh(self, user: str) -> None:
        """The shipped ClusterRole granting the verb refresh, bound in this namespace."""
        role = find(self.shipped, "ClusterRole", REFRESHER)
        rbac = client.RbacAuthorizationV1Api(self.admin)
        try:
            rbac.create_cluster_role(model(client.V1ClusterRole, role))
        except ApiException as exc:
            if exc.status != 409:  # shared by every test's namespace
                raise
        self.bind(user, "ClusterRole", REFRESHER)

    def shipped_allow_list(self) -> str:
        operator = find(self.shipped, "Deployment", "spillover-operator")
        return str(container_env(operator, "operator")[ALLOWED_TARGETS_VAR])

    def start_operator(
        self,
        *,
        allowed_targets: str | None = None,
        refresh: Refresh = "none",
        opted_in: list[dict[str, Any]] | None = None,
        kubeconfig: Path | None = None,
    ) -> OperatorProcess:
        """The real operator with the shipped RBAC (`refresh`: see operator_rbac; or the
        `kubeconfig` of an operator_rbac already made) and, unless told otherwise, the
        shipped SPILLOVER_ALLOWED_TARGETS; its refresh allow-list (SPILLOVER_REFRESH_*)
        is the one of `opted_in` when given."""
        extra: dict[str, str] = {}
        if opted_in is not None:
            env = container_env(find(opted_in, "Deployment", "spillover-operator"), "operator")
            extra = {k: str(v) for k, v in env.items() if k.startswith("SPILLOVER_REFRESH_")}
            assert extra, "the opted-in build gives the operator no refresh allow-list"
        op = OperatorProcess(
            self.namespace,
            kubeconfig or self.operator_rbac(refresh, opted_in=opted_in),
            self.workdir,
            resync_seconds=300,
            allowed_targets=allowed_targets or self.shipped_allow_list(),
            extra_env=extra,
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
        body = policy_manifest(
            self.namespace, {"enabled": True, **spec, "target": {"deployment": target}}, name
        )
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


RESTART = {
    "spec": {
        "template": {
            "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-03T00:00Z"}}
        }
    }
}
MERGE = "application/merge-patch+json"


def write_refusal(
    apps: client.AppsV1Api, namespace: str, kind: str, name: str, *, dry_run: bool = True
) -> ApiException | None:
    """A rollout restart of `kind`/`name` as `apps`'s user (the operator's own request,
    recipe_pods.restart_patch's shape): the refusal, or None when it was admitted."""
    patch = (
        apps.patch_namespaced_deployment
        if kind == "Deployment"
        else (apps.patch_namespaced_stateful_set)
    )
    extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    try:
        patch(name, namespace, RESTART, _content_type=MERGE, **extra)
    except ApiException as exc:
        return exc
    return None


def writes_policy_refusal(
    apps: client.AppsV1Api, namespace: str, kind: str, name: str
) -> ApiException | None:
    """The refusal of a dry-run restart by the admission policy spillover-operator-writes;
    None otherwise: an admitted restart (the policy may not be loaded yet) or RBAC's
    refusal (the authorizer may still be learning a binding)."""
    exc = write_refusal(apps, namespace, kind, name)
    said = "" if exc is None else str(exc.body)
    return exc if WRITES_VAP in said and "the spillover operator may not change" in said else None


def test_rbac_alone_stops_an_operator_with_refresh_opted_in_told_to_allow_payments_api(
    deputy: Deputy, opted_in: list[dict[str, Any]]
) -> None:
    """Refresh opted in (its Role names the three recipe Deployments), no admission
    policy, the operator's allow-list wrongly widened: RBAC refuses its patch of
    payments-api (ApplyFailed with RBAC's 403, not admission's), payments-api is
    untouched."""
    before = deputy.create_deployment(victim_body())
    kubeconfig = deputy.operator_rbac("opted-in", opted_in=opted_in)
    authorizer_knows_the_refresh_role(deputy)
    assert not deputy.operator_may("patch", "deployments", VICTIM, "apps")
    deputy.start_operator(
        allowed_targets=f"{WRC},{VICTIM}", opted_in=opted_in, kubeconfig=kubeconfig
    )
    deputy.create_policy(deputy.author(), "sneaky", VICTIM)
    policy = deputy.wait_reason("sneaky", "ApplyFailed")
    message = condition(policy, "Ready")["message"]
    assert "403" in message and 'cannot patch resource "deployments"' in message, message
    assert WRITES_VAP not in message, message
    untouched(before, deputy.deployment(VICTIM))


def test_admission_alone_stops_an_operator_with_refresh_opted_in_told_to_allow_payments_api(
    deputy: Deputy, opted_in: list[dict[str, Any]]
) -> None:
    """Refresh opted in with its Role's names taken away (a rule without resourceNames
    lets the operator patch every Deployment of the namespace), the operator's
    allow-list wrongly widened too: the admission policy spillover-operator-writes,
    holding the same ConfigMap's list, refuses its patch of payments-api (ApplyFailed
    naming the policy), and payments-api is untouched."""
    before = deputy.create_deployment(victim_body())
    installed = [install_admission(deputy, WRITES_VAP, opted_in)]
    try:
        type_checked(deputy, installed[0][0])
        kubeconfig = deputy.operator_rbac("unnamed", opted_in=opted_in)
        # The premise: RBAC alone lets the operator patch payments-api.
        wait_for(
            "the unnamed refresh Role to reach the authorizer",
            lambda: deputy.operator_may("patch", "deployments", VICTIM, "apps"),
            timeout=10,
        )
        apps = client.AppsV1Api(deputy.connect(kubeconfig))
        wait_for(
            "the admission policy to refuse the operator's patch of payments-api",
            lambda: writes_policy_refusal(apps, deputy.namespace, "Deployment", VICTIM),
        )
        deputy.start_operator(
            allowed_targets=f"{WRC},{VICTIM}", opted_in=opted_in, kubeconfig=kubeconfig
        )
        deputy.create_policy(deputy.author(), "sneaky", VICTIM)
        policy = deputy.wait_reason("sneaky", "ApplyFailed")
        message = condition(policy, "Ready")["message"]
        assert "403" in message and WRITES_VAP in message, message
        untouched(before, deputy.deployment(VICTIM))
    finally:
        remove_admission(deputy, installed)


def authorizer_knows_the_refresh_role(deputy: Deputy) -> None:
    """The RBAC authorizer learns of a new Role and binding from its informers a moment
    later: wait until it grants what the built refresh Role grants (the restart of a
    listed recipe Deployment), so that a refusal after this is RBAC's answer."""
    wait_for(
        "the opted-in Role to reach the authorizer",
        lambda: deputy.operator_may("patch", "deployments", RECIPE, "apps"),
        timeout=10,
    )


def can_i(deputy: Deputy, verb: str, resource: str) -> str:
    """`kubectl auth can-i VERB RESOURCE --as=<the operator's ServiceAccount>` against the
    API server, as an administrator checks it: "yes" or "no"."""
    user = f"system:serviceaccount:{deputy.namespace}:spillover-operator"
    proc = subprocess.run(
        [kubectl(), "--kubeconfig", str(deputy.control_plane.kubeconfig), "auth", "can-i",
         verb, resource, "-n", deputy.namespace, f"--as={user}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), (proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode == (0 if answer == "yes" else 1), (proc.returncode, proc.stderr)
    return answer


def recipe_workloads(deputy: Deputy) -> client.AppsV1Api:
    """The WRC, the three recipe Deployments, ledger, payments-api and the StatefulSet
    payments-db, created by the admin; the API as the operator's ServiceAccount."""
    admin_apps = client.AppsV1Api(deputy.admin)
    for name in (WRC, *RECIPES, LEDGER, VICTIM):
        body = deployment_manifest(name, [container_manifest("c", "example.invalid/c:1", {})])
        admin_apps.create_namespaced_deployment(deputy.namespace, model(client.V1Deployment, body))
    admin_apps.create_namespaced_stateful_set(
        deputy.namespace, model(client.V1StatefulSet, stateful_set_body(PAYMENTS_DB))
    )
    return client.AppsV1Api(deputy.user("spillover-operator"))


def restarted(deputy: Deputy, kind: str, name: str) -> bool:
    if kind == "Deployment":
        template = deputy.deployment(name)["spec"]["template"]["metadata"]
    else:
        raw: Any = client.AppsV1Api(deputy.admin).read_namespaced_stateful_set(
            name, deputy.namespace, _preload_content=False
        )
        template = json.loads(raw.data)["spec"]["template"]["metadata"]
    return "kubectl.kubernetes.io/restartedAt" in (template.get("annotations") or {})


def test_refresh_is_opt_in_and_rbac_alone_names_only_the_recipe_workloads_listed(
    deputy: Deputy, opted_in: list[dict[str, Any]]
) -> None:
    """As shipped (dev overlay) the operator may restart nothing and delete no pod. With
    refresh opted in (three recipe Deployments in one ConfigMap list, no StatefulSet)
    and no admission policy at all, the Role the component builds lets it restart the
    three recipe Deployments and nothing else: `kubectl auth can-i` and
    SubjectAccessReviews answer no for ledger, payments-api and payments-db, and its
    real restarts of them are refused by RBAC (403, `cannot patch resource`). It still
    deletes no pod."""
    deputy.operator_rbac()
    apps = "apps"
    for verb, resource, name in [
        ("patch", "deployments", RECIPE),
        ("patch", "deployments", LEDGER),
        ("patch", "statefulsets", PAYMENTS_DB),
        ("delete", "pods", "ledger-7d9f-abcde"),
        ("delete", "pods", None),
        ("deletecollection", "pods", None),
    ]:
        group = apps if resource != "pods" else ""
        assert not deputy.operator_may(verb, resource, name, group), (verb, resource, name)
    assert deputy.operator_may("patch", "deployments", WRC, apps)  # the premise

    # The refresh Role and binding exactly as the component builds them.
    refresh_role = copy.deepcopy(find(opted_in, "Role", REFRESH_ROLE))
    assert [rule["resourceNames"] for rule in refresh_role["rules"]] == [list(RECIPES)]
    refresh_role["metadata"]["namespace"] = deputy.namespace
    binding = copy.deepcopy(find(opted_in, "RoleBinding", REFRESH_ROLE))
    binding["metadata"]["namespace"] = binding["subjects"][0]["namespace"] = deputy.namespace
    rbac = client.RbacAuthorizationV1Api(deputy.admin)
    rbac.create_namespaced_role(deputy.namespace, model(client.V1Role, refresh_role))
    rbac.create_namespaced_role_binding(deputy.namespace, model(client.V1RoleBinding, binding))
    authorizer_knows_the_refresh_role(deputy)

    assert can_i(deputy, "patch", f"deployments/{VICTIM}") == "no"
    assert can_i(deputy, "patch", f"deployments/{LEDGER}") == "no"
    assert can_i(deputy, "patch", f"statefulsets/{PAYMENTS_DB}") == "no"
    assert can_i(deputy, "patch", "deployments") == "no"  # no name: not every one
    for name in RECIPES:
        assert can_i(deputy, "patch", f"deployments/{name}") == "yes", name
    for verb, resource, name in [
        ("patch", "deployments", VICTIM),
        ("patch", "deployments", LEDGER),
        ("patch", "statefulsets", PAYMENTS_DB),
        ("get", "statefulsets", PAYMENTS_DB),
        ("update", "deployments", RECIPE),
        ("delete", "deployments", RECIPE),
        ("create", "deployments", None),
        ("delete", "pods", "ledger-7d9f-abcde"),
        ("delete", "pods", None),
        ("deletecollection", "pods", None),
    ]:
        group = apps if resource != "pods" else ""
        assert not deputy.operator_may(verb, resource, name, group), (verb, resource, name)

    operator = recipe_workloads(deputy)
    ns = deputy.namespace
    for name in (WRC, *RECIPES):
        exc = write_refusal(operator, ns, "Deployment", name, dry_run=False)
        assert exc is None, (name, exc and exc.body)
        assert restarted(deputy, "Deployment", name), name
    user = f"system:serviceaccount:{ns}:spillover-operator"
    for kind, resource, name in [
        ("Deployment", "deployments", LEDGER),
        ("Deployment", "deployments", VICTIM),
        ("StatefulSet", "statefulsets", PAYMENTS_DB),
    ]:
        exc = write_refusal(operator, ns, kind, name, dry_run=False)
        assert exc is not None and exc.status == 403, (kind, name, exc)
        answer = json.loads(exc.body)
        assert answer["reason"] == "Forbidden", answer
        assert answer["message"] == (
            f'{resource}.apps "{name}" is forbidden: User "{user}" cannot patch resource '
            f'"{resource}" in API group "apps" in the namespace "{ns}"'
        ), answer
        assert not restarted(deputy, kind, name), name


def test_admission_alone_narrows_a_refresh_role_without_names_to_the_recipe_workloads(
    deputy: Deputy, opted_in: list[dict[str, Any]]
) -> None:
    """The refresh Role with its names taken away (RBAC lets the operator patch every
    Deployment and StatefulSet of the namespace): the admission policy
    spillover-operator-writes, with the ConfigMap's lists written into it by the same
    build, admits its restarts of the three recipe Deployments (and its patch of the
    WRC) and refuses ledger, payments-api and every StatefulSet (an empty list names
    none). Real requests as its ServiceAccount."""
    deputy.operator_rbac("unnamed", opted_in=opted_in)
    wait_for(
        "the unnamed refresh Role to reach the authorizer",
        lambda: deputy.operator_may("patch", "deployments", LEDGER, "apps"),
        timeout=10,
    )
    # The premise: RBAC alone would let every one of these through.
    for resource, name in [("deployments", VICTIM), ("statefulsets", PAYMENTS_DB)]:
        assert deputy.operator_may("patch", resource, name, "apps"), (resource, name)

    operator = recipe_workloads(deputy)
    installed = [install_admission(deputy, WRITES_VAP, opted_in)]
    try:
        type_checked(deputy, installed[0][0])
        ns = deputy.namespace
        wait_for(
            "the admission policy to refuse the operator's restart of ledger",
            lambda: writes_policy_refusal(operator, ns, "Deployment", LEDGER),
        )
        for name in (WRC, *RECIPES):
            exc = write_refusal(operator, ns, "Deployment", name, dry_run=False)
            assert exc is None, (name, exc and exc.body)
            assert restarted(deputy, "Deployment", name), name
        allowed_deployments = ", ".join((WRC, *RECIPES))
        for kind, name, allowed in [
            ("Deployment", LEDGER, allowed_deployments),
            ("Deployment", VICTIM, allowed_deployments),
            ("StatefulSet", PAYMENTS_DB, "none"),
        ]:
            exc = write_refusal(operator, ns, kind, name, dry_run=False)
            assert exc is not None and exc.status == 403, (kind, name, exc)
            message = json.loads(exc.body)["message"]
            assert WRITES_VAP in message, message
            assert "cannot patch resource" not in message, message  # not RBAC's
            assert f"the spillover operator may not change {kind} {ns}/{name}: not named in" in (
                message
            )
            assert (
                f"of ConfigMap spillover-system/spillover-allowed-targets; allowed: {allowed}."
                in (message)
            )
            assert not restarted(deputy, kind, name), name
    finally:
        remove_admission(deputy, installed)


# ---------------------------------------------------------------- 2. admission


def install_admission(
    deputy: Deputy, name: str = VAP, source: list[dict[str, Any]] | None = None
) -> tuple[str, str]:
    """ValidatingAdmissionPolicy `name` and its binding of the shipped build (or of
    `source`, another build; the allow-list is written into the policy). The two
    admission objects are cluster-scoped and the control plane is shared by every
    test's namespace, so they get this namespace's name, the binding matches only this
    namespace, and the operator's identity is its ServiceAccount in this namespace (the
    tests' operator runs there); their rules are the build's."""
    ns = deputy.namespace
    docs = source if source is not None else deputy.shipped
    vap = copy.deepcopy(find(docs, "ValidatingAdmissionPolicy", name))
    binding = copy.deepcopy(find(docs, "ValidatingAdmissionPolicyBinding", name))
    vap["metadata"]["name"] = binding["spec"]["policyName"] = f"{name}-{ns}"
    binding["metadata"]["name"] = f"{name}-{ns}"
    for match in vap["spec"].get("matchConditions") or []:
        match["expression"] = match["expression"].replace(
            SHIPPED_OPERATOR, f"system:serviceaccount:{ns}:spillover-operator"
        )
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    }
    admission = client.AdmissionregistrationV1Api(deputy.admin)
    admission.create_validating_admission_policy(model(client.V1ValidatingAdmissionPolicy, vap))
    admission.create_validating_admission_policy_binding(
        model(client.V1ValidatingAdmissionPolicyBinding, binding)
    )
    return vap["metadata"]["name"], binding["metadata"]["name"]


def type_checked(deputy: Deputy, vap_name: str) -> None:
    """Wait until the API server type-checked the admission policy; no warnings."""
    admission = client.AdmissionregistrationV1Api(deputy.admin)

    def done() -> dict[str, Any] | None:
        raw: Any = admission.read_validating_admission_policy(vap_name, _preload_content=False)
        vap: dict[str, Any] = json.loads(raw.data)
        status = vap.get("status") or {}
        return status if status.get("observedGeneration") == vap["metadata"]["generation"] else None

    status = wait_for(f"the admission policy {vap_name} to be type-checked", done)
    assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status


def remove_admission(deputy: Deputy, installed: list[tuple[str, str]]) -> None:
    admission = client.AdmissionregistrationV1Api(deputy.admin)
    for vap_name, binding_name in installed:
        admission.delete_validating_admission_policy_binding(binding_name)
        admission.delete_validating_admission_policy(vap_name)


def refusal(api: client.ApiClient, deputy: Deputy, target: str) -> ApiException | None:
    """The API server's answer to a dry-run create of a policy targeting `target`:
    the refusal, or None if it would be admitted (nothing is stored either way)."""
    body = policy_manifest(
        deputy.namespace, {"enabled": True, "target": {"deployment": target}}, "probe"
    )
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


def dry_run(api: client.ApiClient, deputy: Deputy, spec: dict[str, Any], **meta: Any) -> Any:
    """A dry-run create of a policy for the WRC with `spec` (and metadata `meta`): the
    refusal (ApiException), or None when it would be admitted."""
    body = policy_manifest(
        deputy.namespace, {"enabled": True, "target": {"deployment": WRC}, **spec}, "probe"
    )
    body["metadata"].update(meta)
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, deputy.namespace, PLURAL, body, dry_run="All"
        )
    except ApiException as exc:
        return exc
    return None


def message_of(exc: Any) -> str:
    assert isinstance(exc, ApiException), exc
    return str(json.loads(exc.body)["message"])


def test_admission_refuses_recipe_selectors_and_refresh_modes_alice_was_not_given(
    deputy: Deputy,
) -> None:
    """The shipped ConfigMap allows the selector app.kubernetes.io/name=mcp-host (or a
    narrower one) and the refresh mode Never only."""
    alice = deputy.alice()
    installed = [install_admission(deputy)]
    try:
        type_checked(deputy, installed[0][0])
        ledger = {"recipePods": {"selector": {"matchLabels": {"app": LEDGER}}}}
        refused = wait_for(
            "the admission policy to refuse app=ledger", lambda: dry_run(alice, deputy, ledger)
        )
        assert refused.status == 403
        assert message_of(refused).endswith(
            "spec.recipePods.selector: matchLabels app=ledger does not carry every label of an "
            "allowed recipe pod selector; allowed: app.kubernetes.io/name=mcp-host. Put the "
            "labels of an allowed selector in spec.recipePods.selector.matchLabels (more labels "
            "and matchExpressions may narrow it), or ask the platform team to add the selector "
            "to data.recipeSelectors of ConfigMap spillover-system/spillover-allowed-targets "
            "in their overlay and re-apply it."
        )
        for selector in (
            {"matchLabels": {"app": PAYMENTS_DB}},
            {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]},
            {"matchLabels": {"app.kubernetes.io/name": "mcp-hostx"}},
        ):
            exc = dry_run(alice, deputy, {"recipePods": {"selector": selector}})
            assert "spec.recipePods.selector: " in message_of(exc), selector
        # Narrower than an allowed selector, or the default: admitted.
        mcp = {"app.kubernetes.io/name": "mcp-host"}
        for spec in (
            {},
            {"recipePods": {"selector": {"matchLabels": {**mcp, "recipe": "r1"}}}},
            {
                "recipePods": {
                    "selector": {
                        "matchLabels": mcp,
                        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}],
                    },
                    "refresh": "Never",
                }
            },
        ):
            assert dry_run(alice, deputy, spec) is None, spec

        for mode in ("OnKillSwitch", "Always"):
            exc = dry_run(alice, deputy, {"recipePods": {"refresh": mode}})
            assert message_of(exc).endswith(
                f"spec.recipePods.refresh: {mode} is not allowed in this cluster; allowed: "
                "Never. Set spec.recipePods.refresh to an allowed mode, or ask the platform "
                "team to add it to data.recipeRefresh of ConfigMap "
                "spillover-system/spillover-allowed-targets in their overlay (and to include "
                "manifests/components/recipe-pods-refresh) and re-apply it."
            )
        # A stored policy cannot be widened by a patch either.
        deputy.create_policy(alice, "spillover", WRC)
        custom = client.CustomObjectsApi(alice)
        with pytest.raises(ApiException) as info:
            _patch_policy(custom, deputy.namespace, "spillover", {"spec": ledger})
        assert "spec.recipePods.selector: matchLabels app=ledger" in message_of(info.value)
    finally:
        remove_admission(deputy, installed)


def test_admission_admits_the_refresh_request_only_from_users_allowed_to_refresh(
    deputy: Deputy,
) -> None:
    """The annotation spilloverctl --refresh-recipe-pods writes: metadata, which the
    spec check never sees; the shipped spillover-refresh-request policy asks the
    authorizer for the verb refresh on the policy."""
    alice = deputy.alice()
    installed = [install_admission(deputy, REFRESH_VAP)]
    try:
        type_checked(deputy, installed[0][0])
        deputy.create_policy(alice, "spillover", WRC)
        custom = client.CustomObjectsApi(alice)

        tokens = iter(range(1_000_000))

        def request(*, dry_run: bool = True) -> ApiException | None:
            """Set the annotation to a new token (a dry run unless told otherwise: the
            admission policy is loaded asynchronously, so this is polled)."""
            body = {"metadata": {"annotations": {REFRESH_REQUEST_ANNOTATION: str(next(tokens))}}}
            try:
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, deputy.namespace, PLURAL, "spillover", body,
                    **({"dry_run": "All"} if dry_run else {}),
                )  # fmt: skip
            except ApiException as exc:
                return exc
            return None

        refused = wait_for("the refresh request refused", request)
        assert request(dry_run=False) is not None
        assert refused.status == 403
        assert message_of(refused).endswith(
            f"metadata.annotations[{REFRESH_REQUEST_ANNOTATION}]: alice may not request a "
            f"refresh of the recipe pods of SpilloverPolicy {deputy.namespace}/spillover (it "
            "needs the verb refresh on spilloverpolicies.spillover.clerum.io). Remove the "
            "annotation, or ask the platform team to bind the ClusterRole "
            "spillover-recipe-pods-refresher to you in this namespace."
        )
        annotations = deputy.policy("spillover")["metadata"].get("annotations") or {}
        assert REFRESH_REQUEST_ANNOTATION not in annotations
        # On create too.
        exc = dry_run(alice, deputy, {}, annotations={REFRESH_REQUEST_ANNOTATION: "1"})
        assert f"metadata.annotations[{REFRESH_REQUEST_ANNOTATION}]" in message_of(exc)
        # Other metadata passes (kopf's finalizer and annotations, labels).
        _patch_policy(custom, deputy.namespace, "spillover", {"metadata": {"labels": {"a": "b"}}})
        _patch_policy(
            custom,
            deputy.namespace,
            "spillover",
            {"metadata": {"annotations": {"example.com/note": "x"}}},
        )
        # Granted the verb: admitted.
        deputy.grant_refresh("alice")
        wait_for("the refresh request admitted once granted", lambda: request() is None)
        assert request(dry_run=False) is None
        annotations = deputy.policy("spillover")["metadata"]["annotations"]
        assert REFRESH_REQUEST_ANNOTATION in annotations
    finally:
        remove_admission(deputy, installed)


def test_crd_refuses_malformed_selectors_and_null_enabled(deputy: Deputy) -> None:
    """For everyone (the API server's schema), before admission or the operator."""
    alice = deputy.alice()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"recipePods": {"selector": {"matchLabels": {"bad key!": "x"}}}}, "a label key must be"),
        (
            {"recipePods": {"selector": {"matchLabels": {"app": "mcp-host,tier!=x"}}}},
            "spec.recipePods.selector.matchLabels.app",
        ),
        ({"recipePods": {"selector": {"matchLabels": {"app": "v" * 70}}}}, "63"),
        (
            {"recipePods": {"selector": {"matchLabels": {f"l{i}": "v" for i in range(2000)}}}},
            "spec.recipePods.selector.matchLabels: Too many: 2000: must have at most 16 items",
        ),
        (
            {
                "recipePods": {
                    "selector": {
                        "matchExpressions": [{"key": "k", "operator": "In", "values": ["a,b"]}]
                    }
                }
            },
            "values[0]",
        ),
        (
            {"recipePods": {"selector": {"matchExpressions": [{"key": "k", "operator": "In"}]}}},
            "In and NotIn need at least one value",
        ),
        (
            {"enabled": None},
            'spec.enabled: Unsupported value: null: supported values: "true", "false"',
        ),
    ]
    for spec, named in cases:
        exc = dry_run(alice, deputy, spec)
        assert isinstance(exc, ApiException) and exc.status == 422, (spec, exc)
        assert named in message_of(exc), (named, message_of(exc))

    # The largest selector the CRD admits keeps the policy small: it is stored, gets a
    # status and, with a finalizer, can still be deleted.
    key = "a" * 253 + "/" + "b" * 60
    biggest = {
        "matchLabels": {f"{key}{i:02}": "v" * 63 for i in range(16)},
        "matchExpressions": [
            {
                "key": f"{key}{i:02}",
                "operator": "In",
                "values": [f"{'v' * 61}{j:02}" for j in range(16)],
            }
            for i in range(16)
        ],
    }
    deputy.create_policy(alice, "biggest", WRC, recipePods={"selector": biggest})
    stored = deputy.policy("biggest")
    assert len(json.dumps(stored)) < 64 * 1024
    admin = client.CustomObjectsApi(deputy.admin)
    _patch_policy(admin, deputy.namespace, "biggest", {"metadata": {"finalizers": ["x/y"]}})
    admin.patch_namespaced_custom_object_status(
        GROUP, VERSION, deputy.namespace, PLURAL, "biggest",
        {"status": {"recipePods": {"selector": selector_string(biggest), "matched": 0}}},
    )  # fmt: skip
    admin.delete_namespaced_custom_object(GROUP, VERSION, deputy.namespace, PLURAL, "biggest")
    _patch_policy(admin, deputy.namespace, "biggest", {"metadata": {"finalizers": None}})
    assert _policy_or_none(admin, deputy.namespace, "biggest") is None


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


def stateful_set_body(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container_manifest("db", "postgres:16", {"X": "1"})]},
            },
        },
    }


def test_operator_restarts_and_deletes_nothing_outside_its_refresh_allow_list(
    deputy: Deputy, opted_in: list[dict[str, Any]]
) -> None:
    """RBAC widened by mistake (the old refresh Role: patch every Deployment and
    StatefulSet, delete every pod), no admission: alice's selectors and refresh
    request still make the operator touch nothing but report the refusal."""
    deputy.create_deployment(wrc_body())
    ledger = deputy.create_deployment(
        deployment_manifest(LEDGER, [container_manifest("ledger", "ledger:1", {})], replicas=2)
    )
    apps = client.AppsV1Api(deputy.admin)
    apps.create_namespaced_stateful_set(
        deputy.namespace, model(client.V1StatefulSet, stateful_set_body(PAYMENTS_DB))
    )
    victim = deputy.create_deployment(victim_body())
    core = client.CoreV1Api(deputy.admin)

    def pods(app: str) -> list[str]:
        items = core.list_namespaced_pod(deputy.namespace, label_selector=f"app={app}").items
        return sorted(p.metadata.name for p in items if p.metadata.deletion_timestamp is None)

    wait_for("two ledger pods", lambda: len(pods(LEDGER)) == 2)
    wait_for("the payments-db pod", lambda: len(pods(PAYMENTS_DB)) == 1)
    before = {app: pods(app) for app in (LEDGER, PAYMENTS_DB, VICTIM)}
    db_before: Any = apps.read_namespaced_stateful_set(
        PAYMENTS_DB, deputy.namespace, _preload_content=False
    )
    db_before = json.loads(db_before.data)

    op = deputy.start_operator(refresh="wide", opted_in=opted_in)
    alice = deputy.alice()
    custom = client.CustomObjectsApi(alice)

    def refused(owner: str) -> Any:
        def probe() -> dict[str, Any] | None:
            pol = deputy.policy("spillover")
            message = condition(pol, "RecipePodsCurrent").get("message", "")
            return pol if f"refresh refused: {owner} is not a recipe workload" in message else None

        return wait_for(f"the refresh of {owner} refused", probe, operator=op)

    # 1. app=ledger with the kill switch engaged and refresh Always.
    deputy.create_policy(
        alice, "spillover", WRC, enabled=False,
        recipePods={"selector": {"matchLabels": {"app": LEDGER}}, "refresh": "Always"},
    )  # fmt: skip
    pol = refused(f"Deployment/{LEDGER}")
    assert pol["status"]["recipePods"]["refreshRefused"] == [f"Deployment/{LEDGER}"]
    assert pol["status"]["recipePods"]["staleOwners"] == [
        {"owner": f"Deployment/{LEDGER}", "stale": 2}
    ]
    # 2. app=payments-db, refresh OnKillSwitch.
    db_pods = {"selector": {"matchLabels": {"app": PAYMENTS_DB}}, "refresh": "OnKillSwitch"}
    _patch_policy(custom, deputy.namespace, "spillover", {"spec": {"recipePods": db_pods}})
    refused(f"StatefulSet/{PAYMENTS_DB}")
    # 3. app=payments-api, refresh Never, three refresh requests by annotation.
    victim_pods = {"selector": {"matchLabels": {"app": VICTIM}}, "refresh": "Never"}
    _patch_policy(custom, deputy.namespace, "spillover", {"spec": {"recipePods": victim_pods}})
    for token in ("1", "2", "3"):
        body = {"metadata": {"annotations": {REFRESH_REQUEST_ANNOTATION: token}}}
        _patch_policy(custom, deputy.namespace, "spillover", body)

        def handled(token: str = token) -> dict[str, Any] | None:
            pol = deputy.policy("spillover")
            done = (pol.get("status") or {}).get("recipePods", {}).get("handledRequest")
            return pol if done == token else None

        pol = wait_for(f"refresh request {token} handled", handled, operator=op)
    assert any(
        f"Deployment/{VICTIM} is not a recipe workload" in e["message"]
        for e in deputy.events_about("SpilloverPolicy", "spillover", "RecipePodsRefreshForbidden")
    )

    # Nothing was restarted, no pod deleted, no field of theirs managed by the operator.
    assert {app: pods(app) for app in (LEDGER, PAYMENTS_DB, VICTIM)} == before
    for name, earlier in ((LEDGER, ledger), (VICTIM, victim)):
        now = deputy.deployment(name)
        assert now["spec"] == earlier["spec"], name
        managers = {m.get("manager") for m in now["metadata"].get("managedFields") or []}
        assert "spillover-operator" not in managers
    db_now: Any = apps.read_namespaced_stateful_set(
        PAYMENTS_DB, deputy.namespace, _preload_content=False
    )
    assert json.loads(db_now.data)["spec"] == db_before["spec"]
    warnings = deputy.events_about("SpilloverPolicy", "spillover", "RecipePodsRefreshForbidden")
    assert {w["type"] for w in warnings} == {"Warning"}
    assert not deputy.events_about("SpilloverPolicy", "spillover", "RecipePodsRefresh")
    # The operator's status and Events name owners and counts, never pods (the
    # ReplicaSet and StatefulSet controllers' own Events do name them).
    reported = json.dumps(pol) + json.dumps([e for e in deputy.events() if by_operator(e)])
    for name in (n for names in before.values() for n in names):
        assert name not in reported, f"pod {name} named in the status or Events"


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
