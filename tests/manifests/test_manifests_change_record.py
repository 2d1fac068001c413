"""Every build ships the admission policy that keeps the change record honest
(spillover-change-record): bound with Deny, failing closed, on the annotation the code
writes and reads. What it admits and refuses is tried on the API server in
tests/integration/test_audit_trail.py."""

from __future__ import annotations

from typing import Any

import pytest
from kustomize_build import build, find, overlay_names
from repo_paths import MANIFESTS
from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION

VAP = "spillover-change-record"


def check(docs: list[dict[str, Any]]) -> None:
    vap = find(docs, "ValidatingAdmissionPolicy", VAP)
    binding = find(docs, "ValidatingAdmissionPolicyBinding", VAP)
    assert binding["spec"]["policyName"] == VAP
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in binding["spec"]  # every namespace
    assert vap["spec"]["failurePolicy"] == "Fail"
    rule = vap["spec"]["matchConstraints"]["resourceRules"][0]
    assert (rule["apiGroups"], rule["resources"]) == (
        ["spillover.clerum.io"],
        ["spilloverpolicies"],
    )
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    text = str(vap["spec"])
    assert f"'{CHANGE_RECORD_ANNOTATION}'" in text
    assert "request.userInfo.username" in text
    assert "object.metadata.generation" in text
    assert len(vap["spec"]["validations"]) == 3


def test_base_ships_the_change_record_policy() -> None:
    check(build(MANIFESTS / "base"))


@pytest.mark.parametrize("overlay", overlay_names())
def test_every_overlay_ships_it(overlay: str) -> None:
    check(build(MANIFESTS / "overlays" / overlay))
