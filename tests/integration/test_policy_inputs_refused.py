"""Issue 39, item 5: the inputs that ended as something the writer did not say are
refused, each naming what is wrong and how to fix it, through our kubectl (`make
kubectl`) on the local control plane with the project's CRD and the shipped admission
policy spillover-policy-fields (bound to the test's namespace only: the control plane
is shared), and through spilloverctl as a user runs it (the installed console script).

- a size with a fraction (`thresholdBytes: 65536.0`): the CRD refuses a request that
  carries one (`kubectl create --raw`, any client that sends the number as written).
  `kubectl apply` itself turns 65536.0 into the integer 65536 before it sends anything:
  the server never sees the fraction, and the policy holds 65536. spilloverctl refuses
  it in a file (`render`) and on its command line (`set`);
- `refresh: null`: refused by the CRD where the null reaches the server (server-side
  apply, `kubectl create`), and by the admission policy where client-side `kubectl
  apply` leaves it out of its request (its last-applied-configuration keeps it);
- an unknown field (a `recipePods.refrsh` typo) under `kubectl apply --validate=false`:
  kept by the CRD and refused by the admission policy, naming it and the fields its
  object takes; without the admission policy the operator refuses the stored policy;
- a `target.container` or `recipePods.container` that does not exist: only the operator
  can know (pods come and go), and its condition names the container and what exists.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from admission_helpers import enforced, shipped_for_namespace
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    condition,
    container_manifest,
    create_object,
    current,
    deployment_manifest,
    policy_manifest,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client
from kubernetes.client import ApiException
from kustomize_build import OVERLAYS, build, kubectl
from spillover_operator import exit_codes
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

VAP = "spillover-policy-fields"
WRC = "wrc"
MCP_HOST = {"app.kubernetes.io/name": "mcp-host"}
ENABLED = "  enabled: true\n"
TARGET = f"  target:\n    deployment: {WRC}\n"


@pytest.fixture(scope="module")
def shipped() -> list[dict[str, Any]]:
    return build(OVERLAYS / "dev")


@pytest.fixture
def fields(
    admin: client.ApiClient, namespace: str, shipped: list[dict[str, Any]]
) -> Iterator[None]:
    """The shipped spillover-policy-fields, its binding narrowed to this namespace;
    waits until it is enforced (a dry-run create with an unknown field is refused)."""
    vap, binding = shipped_for_namespace(shipped, VAP, namespace)
    probe = policy_manifest(namespace, {"enabled": True, "target": {"deployment": WRC}}, "probe")
    probe["spec"]["probe"] = 1

    def refused() -> bool:
        try:
            client.CustomObjectsApi(admin).create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, probe, dry_run="All"
            )
        except ApiException as exc:
            return exc.status == 422 and VAP in str(exc.body)
        return False

    with enforced(admin, vap, binding, refused):
        yield


def manifest(tmp_path: Path, namespace: str, spec_yaml: str, name: str = "spillover") -> Path:
    """A policy manifest as a person writes it (YAML text, so 65536.0 and null stay)."""
    path = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(
        "apiVersion: spillover.clerum.io/v1alpha1\nkind: SpilloverPolicy\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n{spec_yaml}"
    )
    return path


def run_kubectl(control_plane: LocalCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl(), "--kubeconfig", str(control_plane.kubeconfig), *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def spilloverctl(*argv: str) -> subprocess.CompletedProcess[str]:
    """spilloverctl as a user runs it: the installed console script."""
    script = Path(sys.executable).parent / "spilloverctl"
    proc = subprocess.run(
        [str(script), *argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def refused(proc: subprocess.CompletedProcess[str], *said: str) -> None:
    assert proc.returncode != 0, proc.stdout
    for text in said:
        assert text in proc.stderr, proc.stderr


def stored(admin: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    got = client.CustomObjectsApi(admin).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )
    return list(got["items"])


# ---- (a) a size with a fraction -----------------------------------------------------


def test_a_size_with_a_fraction_is_refused_where_it_is_sent(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    for key, value in (("thresholdBytes", "65536.0"), ("budgetBytes", "1.6777216e7")):
        body = tmp_path / f"{key}.json"
        body.write_text(
            '{"apiVersion":"spillover.clerum.io/v1alpha1","kind":"SpilloverPolicy",'
            f'"metadata":{{"name":"spillover","namespace":"{namespace}"}},'
            f'"spec":{{"enabled":true,"target":{{"deployment":"{WRC}"}},"{key}":{value}}}}}'
        )
        # The number as written reaches the API server: refused, naming field and fix.
        refused(
            run_kubectl(control_plane, "create", "--raw", path, "-f", str(body)),
            f"spec.{key}",
            "must be a whole number of bytes written without a decimal point or an exponent",
            "(65536, not 65536.0 or 6.5536e4)",
        )
        assert stored(admin, namespace) == []

    # spilloverctl: a file with 65536.0, and 65536.0 on the command line.
    written = manifest(tmp_path, namespace, f"{ENABLED}  thresholdBytes: 65536.0\n{TARGET}")
    proc = spilloverctl("render", "-f", str(written))
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stdout + proc.stderr
    assert (
        "spec.thresholdBytes: must be an integer number of bytes (4096..1048576), "
        "got a number 65536.0"
    ) in proc.stderr
    proc = spilloverctl("--kubeconfig", str(control_plane.kubeconfig), "-n", namespace,
                        "set", "--threshold", "65536.0")  # fmt: skip
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stdout + proc.stderr
    assert "--threshold takes a number of bytes" in proc.stderr

    # `kubectl apply` of the same file: kubectl reads 65536.0 as a number and sends the
    # integer 65536 (its request carries no fraction), which is what the policy holds.
    proc = run_kubectl(control_plane, "apply", "-f", str(written))
    assert proc.returncode == 0, proc.stderr
    value = read_policy(admin, namespace)["spec"]["thresholdBytes"]
    assert value == 65536 and type(value) is int


# ---- (b) refresh: null ------------------------------------------------------------

NULL_REFRESH = f"{ENABLED}{TARGET}  recipePods:\n    refresh: null\n"


def test_refresh_null_is_refused_whichever_way_kubectl_sends_it(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    fields: None,
) -> None:
    null = manifest(tmp_path, namespace, NULL_REFRESH)
    # Client-side apply (kubectl's default) leaves the null out of its request.
    refused(
        run_kubectl(control_plane, "apply", "-f", str(null)),
        "spec.recipePods.refresh: null is not a refresh mode",
        "Write refresh: Never, OnKillSwitch or Always, or remove the line for Never.",
    )
    # Server-side apply and create send it: the CRD keeps it (nullable) and refuses it.
    for how in (["apply", "--server-side"], ["create"]):
        refused(
            run_kubectl(control_plane, *how, "-f", str(null)),
            "spec.recipePods.refresh: Unsupported value: null",
            'supported values: "Never", "OnKillSwitch", "Always"',
        )
    assert stored(admin, namespace) == []

    # Over a policy applied with refresh: Always, null would have made it Never.
    always = manifest(tmp_path, namespace, NULL_REFRESH.replace("null", "Always"))
    assert run_kubectl(control_plane, "apply", "-f", str(always)).returncode == 0
    refused(
        run_kubectl(control_plane, "apply", "-f", str(null)),
        "spec.recipePods.refresh: null is not a refresh mode",
    )
    assert read_policy(admin, namespace)["spec"]["recipePods"]["refresh"] == "Always"

    proc = spilloverctl("render", "-f", str(null))
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stdout + proc.stderr
    assert (
        "spec.recipePods.refresh: null is not a refresh mode; write one of Never, "
        "OnKillSwitch, Always, or remove the line (Never)"
    ) in proc.stderr


# ---- (c) an unknown field, with kubectl's field validation off ------------------------

TYPO = f"{ENABLED}{TARGET}  recipePods:\n    refrsh: Always\n"


def test_an_unknown_field_is_refused_even_with_kubectl_validate_false(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    fields: None,
) -> None:
    typo = manifest(tmp_path, namespace, TYPO)
    for how in (["apply", "--validate=false"], ["apply"], ["apply", "--server-side"]):
        refused(
            run_kubectl(control_plane, *how, "-f", str(typo)),
            "unknown field spec.recipePods.refrsh (spec.recipePods takes selector, refresh, "
            "container)",
            "Correct the name or remove it.",
        )
    assert stored(admin, namespace) == []

    # Every level of the policy, each named with what its object takes.
    everywhere = manifest(
        tmp_path,
        namespace,
        f"{ENABLED}  thresholdbytes: 65536\n  target:\n    deployment: {WRC}\n"
        "    contaner: wrc\n  recipePods:\n    selector:\n"
        "      matchLabels: {app.kubernetes.io/name: mcp-host}\n"
        "      matchExpressions: [{key: recipe, operator: Exists, valeus: [x]}]\n",
    )
    refused(
        run_kubectl(control_plane, "apply", "--validate=false", "-f", str(everywhere)),
        "spec.thresholdbytes (spec takes enabled, thresholdBytes, budgetBytes, target, "
        "onDelete, recipePods)",
        "spec.target.contaner (spec.target takes deployment, container)",
        "spec.recipePods.selector.matchExpressions[].valeus (a match expression takes key, "
        "operator, values)",
    )

    # On a stored policy too: the typo is refused, the spec stays as it was.
    never = manifest(tmp_path, namespace, f"{ENABLED}{TARGET}  recipePods:\n    refresh: Never\n")
    assert run_kubectl(control_plane, "apply", "-f", str(never)).returncode == 0
    refused(
        run_kubectl(control_plane, "apply", "--validate=false", "-f", str(typo)),
        "unknown field spec.recipePods.refrsh",
    )
    assert read_policy(admin, namespace)["spec"]["recipePods"] == {"refresh": "Never"}

    proc = spilloverctl("render", "-f", str(typo))
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stdout + proc.stderr
    assert "spec.recipePods.refrsh: unknown field (known fields: selector, refresh, container)" in (
        proc.stderr
    )


# ---- with the operator: what admission cannot know -----------------------------------


def create_workloads(admin: client.ApiClient, namespace: str) -> None:
    """The WRC (container `controller`) and one recipe mcp-host Deployment (container
    `mcp-host`), whose pod kwok runs."""
    create_object(
        admin,
        deployment_manifest(
            WRC, [container_manifest("controller", "example.invalid/wrc:1", {"LOG_LEVEL": "info"})],
            namespace=namespace,
        ),
    )  # fmt: skip
    create_object(
        admin,
        deployment_manifest(
            "mcp-host-r1", [container_manifest("mcp-host", "example.invalid/mcp-host:1")],
            namespace=namespace, labels=MCP_HOST,
        ),
    )  # fmt: skip


def wait_policy(
    admin: client.ApiClient, namespace: str, op: OperatorProcess, what: str,
    check: Callable[[dict[str, Any]], bool],
) -> dict[str, Any]:  # fmt: skip
    def probe() -> dict[str, Any] | None:
        pol = read_policy(admin, namespace)
        return pol if current(pol) and check(pol) else None

    found: dict[str, Any] = wait_for(what, probe, operator=op)
    return found


def status_as_run(control_plane: LocalCluster, namespace: str) -> subprocess.CompletedProcess[str]:
    return spilloverctl("--kubeconfig", str(control_plane.kubeconfig), "-n", namespace, "status")


def test_without_the_admission_policy_the_operator_refuses_an_unknown_field(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Only the CRD installed: the typo is kept, never pruned to a default, and the
    operator refuses the policy naming it (nothing is changed on the Deployment)."""
    create_workloads(admin, namespace)
    typo = manifest(tmp_path, namespace, TYPO)
    assert run_kubectl(control_plane, "apply", "--validate=false", "-f", str(typo)).returncode == 0
    assert read_policy(admin, namespace)["spec"]["recipePods"] == {
        "refrsh": "Always",
        "refresh": "Never",
    }
    op = OperatorProcess(namespace, control_plane.kubeconfig, tmp_path / "op", resync_seconds=300)
    (tmp_path / "op").mkdir()
    op.start()
    try:
        pol = wait_policy(
            admin, namespace, op, "Ready=False InvalidSpec",
            lambda p: condition(p, "Ready").get("reason") == "InvalidSpec",
        )  # fmt: skip
        message = condition(pol, "Ready")["message"]
        assert "spec.recipePods.refrsh: unknown field (known fields: selector, refresh, " in (
            message
        )
        proc = status_as_run(control_plane, namespace)
        assert proc.returncode == exit_codes.MISMATCH, proc.stdout + proc.stderr
        assert "spec.recipePods.refrsh: unknown field" in proc.stdout
    finally:
        op.stop()


def test_a_container_that_does_not_exist_is_named_by_the_operators_condition(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    fields: None,
) -> None:
    create_workloads(admin, namespace)
    op = OperatorProcess(namespace, control_plane.kubeconfig, tmp_path / "op", resync_seconds=300)
    (tmp_path / "op").mkdir()
    op.start()
    try:
        # target.container: admitted (the Deployment's containers may change), refused
        # by the operator, which changes nothing.
        wrong_target = manifest(
            tmp_path, namespace, f"{ENABLED}  target:\n    deployment: {WRC}\n    container: nope\n"
        )
        assert run_kubectl(control_plane, "apply", "-f", str(wrong_target)).returncode == 0
        pol = wait_policy(
            admin, namespace, op, "Ready=False TargetNotFound",
            lambda p: condition(p, "Ready").get("reason") == "TargetNotFound",
        )  # fmt: skip
        said = (
            f"container 'nope' not found in Deployment {namespace}/{WRC}; its containers "
            "are: controller (set spec.target.container to one of them, or omit it to use "
            "the first)"
        )
        assert said in condition(pol, "Ready")["message"]
        proc = status_as_run(control_plane, namespace)
        assert proc.returncode != exit_codes.OK
        assert said in proc.stdout, proc.stdout

        # recipePods.container: the WRC applied, the recipe pods cannot be read.
        wrong_recipe = manifest(
            tmp_path,
            namespace,
            f"{ENABLED}  target:\n    deployment: {WRC}\n    container: controller\n"
            "  recipePods:\n    container: mcpp\n",
        )
        assert run_kubectl(control_plane, "apply", "-f", str(wrong_recipe)).returncode == 0
        pol = wait_policy(
            admin, namespace, op, "RecipePodsCurrent=False ContainerNotFound",
            lambda p: condition(p, "RecipePodsCurrent").get("reason") == "ContainerNotFound",
        )  # fmt: skip
        said = (
            "spec.recipePods.container 'mcpp' is not a container of 1 of the 1 matched pods "
            "(they have: mcp-host), so their values cannot be read; set "
            "spec.recipePods.container to the container that runs the mcp-host, or remove it"
        )
        assert said in condition(pol, "RecipePodsCurrent")["message"]
        out = status_as_run(control_plane, namespace).stdout
        line = next(x for x in out.splitlines() if "RecipePodsCurrent:" in x)
        assert "reason=ContainerNotFound" in line and said in line, out
        assert "no container 'mcpp' in the pod (its containers: mcp-host)" in out
    finally:
        op.stop()
