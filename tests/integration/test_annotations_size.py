"""The shipped admission policy spillover-annotations-size on the local control plane:
a SpilloverPolicy's annotations are bounded to 64 KiB (bytes of keys and values),
the operator's own spillover.clerum.io/ annotations (kopf's state) not counted, those
people write counted; an update that does not grow them passes (kopf's writes, the
finalizer's removal on a policy admitted before the policy was installed).

The policy comes from `kubectl kustomize manifests/overlays/dev`, bound to the test's
namespace only (the control plane is shared by every test)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from admission_helpers import enforced, shipped_for_namespace
from k8s_helpers import policy_manifest
from kubernetes import client
from kubernetes.client import ApiException
from kustomize_build import OVERLAYS, build
from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION, FINALIZER
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

VAP = "spillover-annotations-size"
LIMIT = 64 * 1024


def body(namespace: str, annotations: dict[str, str], name: str = "spillover") -> dict[str, Any]:
    doc = policy_manifest(namespace, {"enabled": True, "target": {"deployment": "wrc"}}, name)
    doc["metadata"]["annotations"] = annotations
    return doc


def create(api: client.ApiClient, doc: dict[str, Any], *, dry_run: bool = False) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        doc["metadata"]["namespace"],
        PLURAL,
        doc,
        dry_run="All" if dry_run else None,
    )


def refusal(api: client.ApiClient, doc: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as info:
        create(api, doc, dry_run=True)
    assert info.value.status == 422, info.value.body
    return str(json.loads(info.value.body)["message"])


def patch(api: client.ApiClient, namespace: str, name: str, meta: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": meta}
    )


@pytest.fixture(scope="module")
def shipped() -> list[dict[str, Any]]:
    return build(OVERLAYS / "dev")


@pytest.fixture
def bounded(
    admin: client.ApiClient, namespace: str, shipped: list[dict[str, Any]]
) -> Iterator[None]:
    vap, binding = shipped_for_namespace(shipped, VAP, namespace)
    probe = body(namespace, {"example.com/notes": "x" * (LIMIT + 1)}, "probe")

    def refused() -> bool:
        try:
            create(admin, probe, dry_run=True)
        except ApiException as exc:
            return exc.status == 422 and VAP in exc.body
        return False

    with enforced(admin, vap, binding, refused):
        yield


def test_annotations_are_bounded_to_64_kib_besides_the_operator_s_own(
    admin: client.ApiClient, namespace: str, bounded: None
) -> None:
    key = "example.com/notes"
    room = LIMIT - len(key)
    create(admin, body(namespace, {key: "x" * room}), dry_run=True)  # exactly 64 KiB
    message = refusal(admin, body(namespace, {key: "x" * (room + 1)}))
    assert f"{LIMIT + 1} bytes of keys and values" in message
    assert "Remove or shorten the largest annotations" in message
    # Bytes, as the API server counts its limit: two bytes per é.
    assert "bytes of keys and values" in refusal(
        admin, body(namespace, {key: "é" * (room // 2 + 1)})
    )
    # Split over several keys it is the same sum.
    half = {f"example.com/part-{i}": "x" * (LIMIT // 2) for i in range(2)}
    refusal(admin, body(namespace, half))
    # kopf's state under the operator's prefix does not count ...
    own = {"spillover.clerum.io/last-handled-configuration": "x" * (2 * LIMIT), key: "x"}
    create(admin, body(namespace, own), dry_run=True)
    # ... what people write under it does (the change record, the legacy reason).
    refusal(admin, body(namespace, {CHANGE_RECORD_ANNOTATION: "x" * (LIMIT + 1)}))
    refusal(admin, body(namespace, {"spillover.clerum.io/change-reason": "x" * (LIMIT + 1)}))


def test_a_policy_admitted_before_is_handled_and_deleted_but_cannot_grow(
    admin: client.ApiClient, namespace: str, shipped: list[dict[str, Any]]
) -> None:
    key = "example.com/notes"
    create(admin, body(namespace, {key: "x" * (2 * LIMIT)}))  # no size policy yet
    vap, binding = shipped_for_namespace(shipped, VAP, namespace)
    probe = body(namespace, {key: "x" * (LIMIT + 1)}, "probe")

    def refused() -> bool:
        try:
            create(admin, probe, dry_run=True)
        except ApiException as exc:
            return exc.status == 422
        return False

    with enforced(admin, vap, binding, refused):
        # The operator's writes: a finalizer, kopf's state; then the finalizer goes.
        patch(
            admin,
            namespace,
            "spillover",
            {"finalizers": [FINALIZER], "annotations": {"spillover.clerum.io/progress": "{}"}},
        )
        patch(admin, namespace, "spillover", {"finalizers": None})
        # Shrinking passes; growing does not.
        patch(admin, namespace, "spillover", {"annotations": {key: "x" * (LIMIT + 10)}})
        with pytest.raises(ApiException) as info:
            patch(admin, namespace, "spillover", {"annotations": {"example.com/more": "y"}})
        assert info.value.status == 422 and VAP in info.value.body
        client.CustomObjectsApi(admin).delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "spillover"
        )
