"""The CRD's field descriptions reach the API server's published OpenAPI v3,
which is what `kubectl explain spilloverpolicies.spec.<field>` reads."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException
from spillover_operator.domain.resource import GROUP, VERSION

pytestmark = pytest.mark.integration

CRD_FILE = Path(__file__).resolve().parents[2] / "manifests" / "crd" / "spilloverpolicies.yaml"
EXPLAINED_FIELDS = ["enabled", "thresholdBytes", "budgetBytes", "target", "onDelete"]


def _published_schema(api: client.ApiClient, deadline_s: float = 60.0) -> dict[str, Any]:
    """The SpilloverPolicy schema from /openapi/v3 (published a moment after the CRD)."""
    path = f"/openapi/v3/apis/{GROUP}/{VERSION}"
    end = time.monotonic() + deadline_s
    last = "not requested"
    while time.monotonic() < end:
        method, url, headers, body, _ = api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        try:
            response = api.call_api(method, url, header_params=headers, body=body)
            response.read()  # type: ignore[no-untyped-call]
        except ApiException as exc:
            last = f"HTTP {exc.status}"
        else:
            if response.status != 200:
                last = f"HTTP {response.status}"
                time.sleep(0.5)
                continue
            data = json.loads(response.data or b"{}")
            schemas = data.get("components", {}).get("schemas", {})
            for name, schema in schemas.items():
                if name.endswith(".SpilloverPolicy"):
                    return dict(schema)
            last = f"no SpilloverPolicy schema among {sorted(schemas)}"
        time.sleep(0.5)
    raise AssertionError(f"{path} never published the SpilloverPolicy schema: {last}")


def test_every_spec_field_is_explained(control_plane: Any) -> None:
    doc = yaml.safe_load(CRD_FILE.read_text())
    with control_plane.api_client() as api:
        ext = client.ApiextensionsV1Api(api)
        try:
            ext.create_custom_resource_definition(doc)
        except ApiException as exc:
            assert exc.status == 409, exc.body
        schema = _published_schema(api)
    spec = schema["properties"]["spec"]
    assert spec.get("description"), "spec has no description"
    for field in EXPLAINED_FIELDS:
        described = spec["properties"][field].get("description", "")
        assert len(described) > 20, f"spec.{field} has no useful description: {described!r}"
    target = spec["properties"]["target"]["properties"]
    for field in ("deployment", "container"):
        assert target[field].get("description"), f"spec.target.{field} has no description"
