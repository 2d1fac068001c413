"""The shipped admission policies after their bindings are removed and the overlay is
applied again, on the local control plane (kube-apiserver at the pinned version): every
policy of the dev build applied with `kubectl apply`, its bindings deleted, a pause,
then the build of the same overlay with one more allowed Deployment applied (changing
the allow-list is changing the overlay and re-applying it). A SpilloverPolicy for the
newly allowed Deployment is then admitted (created, and killed with `spilloverctl
kill`, a patch of its spec) and one for an unlisted Deployment refused with the
policy's message naming the allowed ones, on create and on patch.

This is the sequence that breaks a policy reading a ConfigMap parameter (`paramKind:
ConfigMap`, kubernetes/kubernetes#130887): once no binding uses that paramKind for about
a second, the API server stops its parameter informer for good, and the policy then
checks the ConfigMap as it was (here: without the new name) or, the ConfigMap deleted
and re-created meanwhile, refuses every write it matches ("no params found for policy
binding with `Deny` parameterNotFoundAction"), the kill switch included, until the API
server restarts. (Re-applied unchanged, the outdated copy is the current one and hides
the bug: hence the added name. Run against the ConfigMap-parameter policy, this test
times out waiting for wrc-canary, refused with "allowed: workflow-recipe-controller".)
The shipped policies take their lists at build time instead
(tests/manifests/test_manifests_overlays.py checks that none takes a parameter)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from admission_helpers import shipped_for_namespace
from controlplane.localcluster import LocalCluster
from k8s_helpers import model, policy_manifest, read_policy, wait_for
from kubernetes import client, config
from kubernetes.client import ApiException
from kustomize_build import OVERLAYS, build, kubectl
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

TARGETS_VAP = "spillover-allowed-targets"
WRC = "workflow-recipe-controller"  # the dev overlay's allow-list
CANARY = "wrc-canary"  # added to it by the re-applied overlay
UNLISTED = "payments-api"
ONCALL = "oncall"
ADMITTED = "admitted"
# Longer than the API server keeps a parameter informer without a binding using it
# (about a second, kubernetes/kubernetes#130887): the gap `make undeploy` then
# `make deploy` leaves. Nothing the API server exposes says the informer has stopped,
# so this is a pause, not a wait for a condition.
UNBOUND_PAUSE_S = 3.0


def refused_target_message(allowed: tuple[str, ...]) -> str:
    """The policy's refusal of a SpilloverPolicy targeting UNLISTED, in full."""
    return (
        f"spec.target.deployment: Deployment {UNLISTED} is not one the spillover operator "
        f"may configure; allowed: {', '.join(allowed)}. Set spec.target.deployment to an "
        "allowed name, or ask the platform team to add it to data.deployments of ConfigMap "
        "spillover-system/spillover-allowed-targets in their overlay and re-apply it."
    )


@pytest.fixture(scope="module")
def shipped() -> list[dict[str, Any]]:
    """The dev overlay, rendered as a platform team applies it."""
    return build(OVERLAYS / "dev")


@pytest.fixture(scope="module")
def widened(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The dev overlay with CANARY added to the allow-list literal, as a platform team
    changes it (manifests/README.md)."""
    dev = (OVERLAYS / "dev" / "kustomization.yaml").read_text()
    literal = f"      - deployments={WRC}\n"
    assert dev.count(literal) == 1
    overlay = tmp_path_factory.mktemp("widened")
    text = dev.replace(literal, f"      - deployments={WRC},{CANARY}\n")
    text = text.replace("../../", f"{os.path.relpath(OVERLAYS.parent, overlay)}/")
    (overlay / "kustomization.yaml").write_text(text)
    return build(overlay)


def admission_documents(
    shipped: list[dict[str, Any]], namespace: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every ValidatingAdmissionPolicy of the build and its binding, named after
    `namespace` and matching only it (the control plane is shared by every test's
    namespace); their rules and lists are the build's."""
    policies, bindings = [], []
    for doc in shipped:
        if doc["kind"] == "ValidatingAdmissionPolicy":
            vap, binding = shipped_for_namespace(shipped, doc["metadata"]["name"], namespace)
            policies.append(vap)
            bindings.append(binding)
    assert any(p["metadata"]["name"] == f"{TARGETS_VAP}-{namespace}" for p in policies)
    return policies, bindings


def kubectl_run(control_plane: LocalCluster, *argv: str) -> None:
    """Our kubectl as the admin, as `make deploy`/`make undeploy` run it."""
    proc = subprocess.run(
        [kubectl(), "--kubeconfig", str(control_plane.kubeconfig), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def write_documents(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def oncall_user(control_plane: LocalCluster, admin: client.ApiClient, namespace: str) -> Path:
    """A person (client certificate, CN oncall) who may get, list, create and patch
    SpilloverPolicies in `namespace`, and nothing else; returned once RBAC grants it."""
    rbac = client.RbacAuthorizationV1Api(admin)
    verbs = ["get", "list", "create", "patch"]
    rule = {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": verbs}
    rbac.create_namespaced_role(
        namespace, model(client.V1Role, {"metadata": {"name": ONCALL}, "rules": [rule]})
    )
    binding = {
        "metadata": {"name": ONCALL},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ONCALL},
        "subjects": [{"kind": "User", "name": ONCALL, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    rbac.create_namespaced_role_binding(namespace, model(client.V1RoleBinding, binding))
    review = {
        "spec": {
            "user": ONCALL,
            "resourceAttributes": {
                "namespace": namespace,
                "group": GROUP,
                "resource": PLURAL,
                "verb": "patch",
            },
        }
    }
    auth = client.AuthorizationV1Api(admin)
    wait_for(
        f"{ONCALL} granted patch on {PLURAL}",
        lambda: (
            auth.create_subject_access_review(
                model(client.V1SubjectAccessReview, review)
            ).status.allowed
        ),
    )
    return control_plane.user_kubeconfig(ONCALL)


@pytest.fixture
def oncall(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> Iterator[tuple[Path, client.ApiClient]]:
    kubeconfig = oncall_user(control_plane, admin, namespace)
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield kubeconfig, api
    finally:
        api.close()


def create_policy(
    api: client.ApiClient, namespace: str, name: str, target: str, *, dry_run: bool = False
) -> ApiException | None:
    """A SpilloverPolicy for `target` created as `api`'s user: the refusal, or None."""
    body = policy_manifest(namespace, {"enabled": True, "target": {"deployment": target}}, name)
    extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, **extra
        )
    except ApiException as exc:
        return exc
    return None


def message_of(exc: ApiException | None) -> str:
    assert exc is not None, "admitted"
    return str(json.loads(exc.body)["message"])


def answer(api: client.ApiClient, namespace: str, target: str) -> str:
    """The API server's answer to a dry-run create for `target`: ADMITTED or the
    refusal's message."""
    exc = create_policy(api, namespace, "probe", target, dry_run=True)
    return ADMITTED if exc is None else message_of(exc)


@dataclass(frozen=True)
class Answers:
    """Dry-run creates for each allowed target and for UNLISTED; true once every allowed
    one is admitted and UNLISTED refused with the policy's message naming them (shown
    as it is when the wait fails)."""

    allowed: dict[str, str]
    unlisted: str

    def __bool__(self) -> bool:
        expected = refused_target_message(tuple(self.allowed))
        return set(self.allowed.values()) == {ADMITTED} and self.unlisted.endswith(expected)


def enforced(api: client.ApiClient, namespace: str, allowed: tuple[str, ...]) -> None:
    """Wait until spillover-allowed-targets admits exactly `allowed` (and refuses
    UNLISTED saying so): it is loaded asynchronously after an apply."""
    wait_for(
        f"spillover-allowed-targets to admit {', '.join(allowed)} and refuse {UNLISTED}",
        lambda: Answers(
            {target: answer(api, namespace, target) for target in allowed},
            answer(api, namespace, UNLISTED),
        ),
    )


def test_a_reapply_after_a_pause_takes_the_new_allow_list_and_keeps_the_kill_switch_working(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    shipped: list[dict[str, Any]],
    widened: list[dict[str, Any]],
    oncall: tuple[Path, client.ApiClient],
    tmp_path: Path,
) -> None:
    kubeconfig, api = oncall
    policies, bindings = admission_documents(shipped, namespace)
    first = write_documents(tmp_path / "admission.yaml", policies + bindings)
    only_bindings = write_documents(tmp_path / "bindings.yaml", bindings)
    policies, bindings = admission_documents(widened, namespace)
    again = write_documents(tmp_path / "admission-widened.yaml", policies + bindings)
    try:
        kubectl_run(control_plane, "apply", "-f", str(first))
        enforced(api, namespace, (WRC,))
        assert create_policy(api, namespace, "first", WRC) is None

        # The bindings removed, none of them left for longer than the API server keeps
        # a parameter informer unused; then the changed overlay applied.
        kubectl_run(control_plane, "delete", "-f", str(only_bindings))
        wait_for(
            f"{UNLISTED} admitted with the bindings gone",
            lambda: answer(api, namespace, UNLISTED) == ADMITTED,
        )
        time.sleep(UNBOUND_PAUSE_S)
        kubectl_run(control_plane, "apply", "-f", str(again))
        enforced(api, namespace, (WRC, CANARY))

        exc = create_policy(api, namespace, "spillover", CANARY)
        assert exc is None, message_of(exc)
        exc = create_policy(api, namespace, "sneaky", UNLISTED)
        assert exc is not None and exc.status == 403, exc
        assert message_of(exc).endswith(refused_target_message((WRC, CANARY))), message_of(exc)

        # The kill switch: spilloverctl kill patches the spec, which the policy checks.
        out, err = io.StringIO(), io.StringIO()
        code = run(
            ["--kubeconfig", str(kubeconfig), "-n", namespace, "kill", "spillover",
             "--reason", "INC-1 spill storm after a redeploy"],
            stdout=out, stderr=err,
        )  # fmt: skip
        assert code == exit_codes.OK, out.getvalue() + err.getvalue()
        assert read_policy(admin, namespace, "spillover")["spec"]["enabled"] is False

        # Retargeting it is a spec change the policy refuses, with its message.
        custom = client.CustomObjectsApi(api)
        with pytest.raises(ApiException) as info:
            custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                "spillover",
                {"spec": {"target": {"deployment": UNLISTED}}},
            )
        assert info.value.status == 403
        assert message_of(info.value).endswith(refused_target_message((WRC, CANARY)))
        policy = read_policy(admin, namespace, "spillover")["spec"]
        assert policy["target"]["deployment"] == CANARY
    finally:
        kubectl_run(control_plane, "delete", "--ignore-not-found", "-f", str(again))
