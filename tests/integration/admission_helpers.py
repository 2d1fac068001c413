"""Admission policies on the shared local control plane: installed for one test's
namespace (or one user), waited for until the API server enforces them, removed after.

ValidatingAdmissionPolicies are cluster-scoped and loaded asynchronously: a test that
wrote and then relied on one at once would race the API server. `enforced` installs,
waits until the type check has run and a probe is refused, and removes on exit."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from k8s_helpers import model, wait_for
from kubernetes import client
from kustomize_build import find


def shipped_for_namespace(
    shipped: list[dict[str, Any]], name: str, namespace: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped policy `name` and its binding, renamed after `namespace` and matching
    only it (their rules are the shipped ones)."""
    vap = copy.deepcopy(find(shipped, "ValidatingAdmissionPolicy", name))
    binding = copy.deepcopy(find(shipped, "ValidatingAdmissionPolicyBinding", name))
    vap["metadata"]["name"] = binding["spec"]["policyName"] = f"{name}-{namespace}"
    binding["metadata"]["name"] = f"{name}-{namespace}"
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    }
    return vap, binding


def refusing_policy(
    name: str,
    *,
    group: str,
    resource: str,
    operations: list[str],
    condition: str,
    message: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A policy (and its binding) that refuses every request matching `condition`."""
    vap = {
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": ["*"],
                        "operations": operations,
                        "resources": [resource],
                    }
                ]
            },
            "matchConditions": [{"name": "only-these", "expression": condition}],
            "validations": [{"expression": "false", "reason": "Forbidden", "message": message}],
        },
    }
    binding = {
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return vap, binding


@contextmanager
def enforced(
    admin: client.ApiClient,
    vap: Mapping[str, Any],
    binding: Mapping[str, Any],
    refused: Callable[[], bool],
) -> Iterator[None]:
    """Install `vap` and `binding`; return once the API server type-checked the policy
    with no warning and `refused()` (a dry-run probe) says it is enforced; remove both
    on exit."""
    api = client.AdmissionregistrationV1Api(admin)
    name = vap["metadata"]["name"]
    api.create_validating_admission_policy(model(client.V1ValidatingAdmissionPolicy, vap))
    try:
        api.create_validating_admission_policy_binding(
            model(client.V1ValidatingAdmissionPolicyBinding, binding)
        )
        try:

            def type_checked() -> dict[str, Any] | None:
                raw: Any = api.read_validating_admission_policy(name, _preload_content=False)
                got: dict[str, Any] = json.loads(raw.data)
                status = got.get("status") or {}
                done = status.get("observedGeneration") == got["metadata"]["generation"]
                return status if done else None

            status = wait_for(f"admission policy {name} to be type-checked", type_checked)
            assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
            wait_for(f"admission policy {name} to be enforced", refused)
            yield
        finally:
            api.delete_validating_admission_policy_binding(binding["metadata"]["name"])
    finally:
        api.delete_validating_admission_policy(name)
