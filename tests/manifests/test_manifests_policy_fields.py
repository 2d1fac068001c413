"""Every build ships the admission policy that refuses what the API server would
otherwise drop or default without a word (spillover-policy-fields): bound with Deny,
failing closed, with the same field names as the operator's model and the CRD. What it
refuses is tried on the API server with kubectl in
tests/integration/test_policy_inputs_refused.py."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml
from kustomize_build import build, find, overlay_names
from repo_paths import MANIFESTS
from spillover_operator.domain import model
from spillover_operator.domain.policy import SELECTOR_FIELDS

VAP = "spillover-policy-fields"
CRD = Path(MANIFESTS) / "crd" / "spilloverpolicies.yaml"


def _lists(vap: dict[str, Any]) -> dict[str, list[str]]:
    """The policy's known-field lists (variables `*Fields`), as Python lists."""
    return {
        var["name"]: ast.literal_eval(var["expression"])
        for var in vap["spec"]["variables"]
        if var["name"].endswith("Fields")
    }


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
    )  # the status subresource is not matched: the operator's writes never meet it
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    expressions = [v["expression"] for v in vap["spec"]["validations"]]
    assert any("'\"refresh\":null'" in e for e in expressions), expressions


def test_base_ships_the_policy_fields_policy() -> None:
    check(build(MANIFESTS / "base"))


@pytest.mark.parametrize("overlay", overlay_names())
def test_every_overlay_ships_it(overlay: str) -> None:
    check(build(MANIFESTS / "overlays" / overlay))


def test_its_field_names_are_the_models_and_the_crds() -> None:
    """A field added to the model and the CRD but not here would be refused as unknown."""
    vap = find(build(MANIFESTS / "base"), "ValidatingAdmissionPolicy", VAP)
    lists = _lists(vap)
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = root["properties"]["spec"]
    recipe = spec["properties"]["recipePods"]
    selector = recipe["properties"]["selector"]
    expression = selector["properties"]["matchExpressions"]["items"]
    assert sorted(lists) == [
        "expressionFields",
        "recipePodsFields",
        "rootFields",
        "selectorFields",
        "specFields",
        "targetFields",
    ]
    assert lists["specFields"] == list(model.SPEC_KEYS)
    assert lists["targetFields"] == list(model.TARGET_KEYS)
    assert lists["recipePodsFields"] == list(model.RECIPE_POD_KEYS)
    assert lists["selectorFields"] == list(SELECTOR_FIELDS)
    assert sorted(lists["rootFields"]) == sorted(root["properties"])
    assert sorted(lists["specFields"]) == sorted(spec["properties"])
    assert sorted(lists["targetFields"]) == sorted(spec["properties"]["target"]["properties"])
    assert sorted(lists["recipePodsFields"]) == sorted(recipe["properties"])
    assert sorted(lists["selectorFields"]) == sorted(selector["properties"])
    assert sorted(lists["expressionFields"]) == sorted(expression["properties"])
