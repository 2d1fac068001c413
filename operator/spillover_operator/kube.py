"""Kubernetes API helpers used by both the operator and spilloverctl.

Objects travel as plain dicts in API JSON form: responses are decoded from the raw
JSON the API server sent (not through the client's models), so what we compare and
report is exactly what is stored.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client import ApiException, AppsV1Api, CustomObjectsApi

from spillover_operator.constants import FIELD_MANAGER, GROUP, PLURAL, VERSION
from spillover_operator.envplan import EnvPlan

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


def _decode(response: Any) -> dict[str, Any]:
    data = response.data
    decoded = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    if not isinstance(decoded, dict):
        raise ValueError("the API server answered with something that is not an object")
    return decoded


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404


def is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 409


def read_deployment(apps_api: AppsV1Api, namespace: str, name: str) -> dict[str, Any] | None:
    """The Deployment as stored, or None if it does not exist."""
    try:
        return _decode(apps_api.read_namespaced_deployment(name, namespace, _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def apply_env_patch(
    apps_api: AppsV1Api, namespace: str, name: str, plan: EnvPlan
) -> dict[str, Any]:
    """Send `plan.patch` as a strategic merge patch; return the Deployment after it.

    The patch carries the resourceVersion the plan was made from: an ApiException with
    status 409 means the Deployment changed meanwhile (re-read, re-plan, retry). A plan
    with nothing to change writes nothing and returns the Deployment as it is.
    """
    if plan.patch is None:
        current = read_deployment(apps_api, namespace, name)
        if current is None:
            raise ApiException(status=404, reason=f"Deployment {namespace}/{name} not found")
        return current
    response = apps_api.patch_namespaced_deployment(
        name,
        namespace,
        plan.patch,
        field_manager=FIELD_MANAGER,
        _content_type=STRATEGIC_MERGE,
        _preload_content=False,
    )
    return _decode(response)


def read_policy(custom_api: CustomObjectsApi, namespace: str, name: str) -> dict[str, Any] | None:
    """The SpilloverPolicy as stored, or None if it does not exist."""
    try:
        return _decode(
            custom_api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
            )
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_policies(custom_api: CustomObjectsApi, namespace: str) -> list[dict[str, Any]]:
    """Every SpilloverPolicy in the namespace."""
    body = _decode(
        custom_api.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _preload_content=False
        )
    )
    items = body.get("items") or []
    return [item for item in items if isinstance(item, dict)]


def patch_policy(
    custom_api: CustomObjectsApi, namespace: str, name: str, patch: dict[str, Any]
) -> dict[str, Any]:
    """A JSON merge patch on the policy (spec/metadata)."""
    return _decode(
        custom_api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            patch,
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
            _preload_content=False,
        )
    )


def patch_policy_status(
    custom_api: CustomObjectsApi, namespace: str, name: str, status_patch: dict[str, Any]
) -> dict[str, Any]:
    """A JSON merge patch on the policy's status subresource."""
    return _decode(
        custom_api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"status": status_patch},
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
            _preload_content=False,
        )
    )
