"""parse_spec / parse_policy_document / spec_to_json: strict validation, clear errors."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from spillover_operator.domain.model import PolicySpec
from spillover_operator.domain.policy import (
    InvalidSpecError,
    parse_policy_document,
    parse_policy_spec,
    parse_spec,
    spec_to_json,
)

TARGET = {"deployment": "workflow-recipe-controller"}


def test_minimal_spec_gets_the_defaults_of_the_optional_fields() -> None:
    spec = parse_spec({"enabled": True, "target": TARGET})
    assert spec == PolicySpec(
        enabled=True,
        threshold_bytes=None,
        budget_bytes=None,
        deployment="workflow-recipe-controller",
        container=None,
        on_delete="Retain",
    )


def test_full_spec() -> None:
    spec = parse_spec(
        {
            "enabled": False,
            "thresholdBytes": 32768,
            "budgetBytes": 1048576,
            "target": {"deployment": "wrc", "container": "controller"},
            "onDelete": "Remove",
        }
    )
    assert spec == PolicySpec(False, 32768, 1048576, "wrc", "controller", "Remove")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("thresholdBytes", 4096),
        ("thresholdBytes", 1048576),
        ("budgetBytes", 1048576),
        ("budgetBytes", 268435456),
    ],
)
def test_bounds_are_inclusive(key: str, value: int) -> None:
    spec = parse_spec({"enabled": True, key: value, "target": TARGET})
    assert value in (spec.threshold_bytes, spec.budget_bytes)


def test_null_optional_fields_mean_unset() -> None:
    spec = parse_spec(
        {"enabled": True, "thresholdBytes": None, "budgetBytes": None, "target": TARGET}
    )
    assert (spec.enabled, spec.threshold_bytes, spec.budget_bytes) == (True, None, None)


def test_null_enabled_is_refused_not_taken_as_on() -> None:
    """`enabled: null` is no answer to "on or off?": the kill switch must not read it as
    on (the CRD refuses it too)."""
    with pytest.raises(InvalidSpecError) as info:
        parse_spec({"enabled": None, "target": TARGET})
    assert info.value.problems == [
        "spec.enabled: null is neither on nor off; write `enabled: true` (spillover on) "
        "or `enabled: false` (spillover off)"
    ]


def test_missing_enabled_is_refused_not_taken_as_on() -> None:
    """The CRD requires `enabled` with no default (client-side `kubectl apply` sends
    `enabled: null` as absent): a policy stored without it, under an older CRD, must be
    refused, never read as on."""
    with pytest.raises(InvalidSpecError) as info:
        parse_spec({"target": TARGET, "thresholdBytes": 32768})
    assert info.value.problems == [
        "spec.enabled: required, with no default; write `enabled: true` (spillover on) "
        "or `enabled: false` (spillover off)"
    ]


@pytest.mark.parametrize(
    ("selector", "named"),
    [
        ({"matchLabels": {"bad key!": "x"}}, "spec.recipePods.selector.matchLabels['bad key!']"),
        (
            {"matchLabels": {"app": "mcp-host,tier!=x"}},
            "spec.recipePods.selector.matchLabels['app']: label value 'mcp-host,tier!=x'",
        ),
        ({"matchLabels": {"app": "v" * 70}}, "at most 63 characters"),
        ({"matchLabels": {f"l{i}": "v" for i in range(2000)}}, "2000 labels, at most 16"),
        (
            {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a b"]}]},
            "spec.recipePods.selector.matchExpressions[0]: label value 'a b'",
        ),
    ],
)
def test_recipe_pod_selectors_are_checked_as_kubernetes_checks_labels(
    selector: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidSpecError) as info:
        parse_spec({"enabled": True, "target": TARGET, "recipePods": {"selector": selector}})
    assert len(info.value.problems) == 1
    assert named in info.value.problems[0]


BAD_SPECS: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "threshold below min",
        {"enabled": True, "thresholdBytes": 100, "target": TARGET},
        ["spec.thresholdBytes", "100 is below the minimum 4096"],
    ),
    (
        "threshold above max",
        {"enabled": True, "thresholdBytes": 1048577, "target": TARGET},
        ["spec.thresholdBytes", "above the maximum 1048576"],
    ),
    (
        "budget below min",
        {"enabled": True, "budgetBytes": 1048575, "target": TARGET},
        ["spec.budgetBytes", "below the minimum 1048576"],
    ),
    (
        "budget above max",
        {"enabled": True, "budgetBytes": 268435457, "target": TARGET},
        ["spec.budgetBytes", "above the maximum 268435456"],
    ),
    (
        "threshold as a string",
        {"enabled": True, "thresholdBytes": "32768", "target": TARGET},
        ["spec.thresholdBytes", "must be an integer", "a string '32768'"],
    ),
    (
        "threshold as a float",
        {"enabled": True, "thresholdBytes": 32768.0, "target": TARGET},
        ["spec.thresholdBytes", "a number"],
    ),
    (
        "threshold as a bool",
        {"enabled": True, "thresholdBytes": True, "target": TARGET},
        ["spec.thresholdBytes", "a boolean"],
    ),
    (
        "enabled as a string",
        {"enabled": "false", "target": TARGET},
        ["spec.enabled", "must be a boolean", "a string 'false'"],
    ),
    ("enabled as an int", {"enabled": 0, "target": TARGET}, ["spec.enabled", "an integer 0"]),
    ("missing target", {"enabled": True}, ["spec.target: required", "deployment"]),
    (
        "target not a mapping",
        {"enabled": True, "target": "wrc"},
        ["spec.target: must be a mapping"],
    ),
    (
        "missing target.deployment",
        {"enabled": True, "target": {"container": "c"}},
        ["spec.target.deployment: required"],
    ),
    (
        "bad deployment name",
        {"enabled": True, "target": {"deployment": "WRC_Controller"}},
        ["spec.target.deployment", "'WRC_Controller' is not a valid Deployment name"],
    ),
    (
        "bad container name",
        {"enabled": True, "target": {"deployment": "wrc", "container": "a.b"}},
        ["spec.target.container", "not a valid container name"],
    ),
    (
        "unknown spec field",
        {"enabled": True, "treshold": 5000, "target": TARGET},
        ["spec.treshold: unknown field", "known fields"],
    ),
    (
        "unknown target field",
        {"enabled": True, "target": {"deployment": "wrc", "namespace": "x"}},
        ["spec.target.namespace: unknown field"],
    ),
    (
        "bad onDelete",
        {"enabled": True, "onDelete": "Delete", "target": TARGET},
        ["spec.onDelete", "one of Retain, Remove", "'Delete'"],
    ),
]


@pytest.mark.parametrize(("case", "spec", "expected"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_names_the_field(case: str, spec: dict[str, Any], expected: list[str]) -> None:
    with pytest.raises(InvalidSpecError) as info:
        parse_spec(spec)
    assert len(info.value.problems) == 1, info.value.problems
    text = str(info.value)
    for fragment in expected:
        assert fragment in text, f"{case}: {fragment!r} not in {text!r}"


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(InvalidSpecError) as info:
        parse_spec({"thresholdBytes": 1, "budgetBytes": "big", "enabled": "yes"})
    paths = sorted(p.split(":")[0] for p in info.value.problems)
    assert paths == ["spec.budgetBytes", "spec.enabled", "spec.target", "spec.thresholdBytes"]
    assert "4 problems" in str(info.value)


def test_spec_not_a_mapping() -> None:
    with pytest.raises(InvalidSpecError, match="spec: must be a mapping, got a list"):
        parse_spec([1, 2])  # type: ignore[arg-type]


def _doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "spillover.clerum.io/v1alpha1",
        "kind": "SpilloverPolicy",
        "metadata": {"name": "spillover", "namespace": "clerum"},
        "spec": {"enabled": True, "thresholdBytes": 32768, "target": TARGET},
    }
    doc.update(overrides)
    return doc


def test_policy_document_ok() -> None:
    meta, spec = parse_policy_document(_doc(), source="policy.yaml")
    assert meta == {"name": "spillover", "namespace": "clerum"}
    assert spec.threshold_bytes == 32768


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (_doc(apiVersion="v1"), "apiVersion: must be 'spillover.clerum.io/v1alpha1', got 'v1'"),
        (_doc(kind="ConfigMap"), "kind: must be 'SpilloverPolicy', got 'ConfigMap'"),
        (_doc(metadata={}), "metadata.name: required"),
        (_doc(metadata={"name": "Bad Name"}), "metadata.name: 'Bad Name' is not a valid name"),
        (_doc(spec=None), "spec: required"),
        (_doc(spec={"thresholdBytes": 1}), "spec.thresholdBytes: 1 is below the minimum"),
        (_doc(extra=1), "extra: unknown top-level field"),
        ("just a string", "expected a SpilloverPolicy mapping"),
        ([_doc()], "got a list"),
        (None, "got null"),
    ],
)
def test_policy_document_errors_name_the_source_and_field(doc: Any, expected: str) -> None:
    with pytest.raises(InvalidSpecError) as info:
        parse_policy_document(doc, source="policy.yaml")
    assert str(info.value).startswith("policy.yaml: invalid SpilloverPolicy")
    assert expected in str(info.value)


def test_not_yaml_text_loaded_as_a_scalar_is_rejected() -> None:
    # A file that is not a YAML mapping (a stray line of text) loads as a string.
    loaded = yaml.safe_load("this is not a policy")
    with pytest.raises(InvalidSpecError, match="expected a SpilloverPolicy mapping"):
        parse_policy_document(loaded, source="notes.txt")


def test_spec_to_json_round_trips() -> None:
    spec = PolicySpec(False, 32768, None, "wrc", None, "Remove")
    body = spec_to_json(spec)
    assert body == {
        "enabled": False,
        "thresholdBytes": 32768,
        "target": {"deployment": "wrc"},
        "onDelete": "Remove",
    }
    assert parse_spec(body) == spec
    full = PolicySpec(True, 4096, 2097152, "wrc", "main", "Retain")
    assert parse_spec(spec_to_json(full)) == full


def test_parse_policy_spec_gives_the_typed_spec_or_the_refusal_as_a_value() -> None:
    valid = parse_policy_spec({"spec": {"target": TARGET, "enabled": True}})
    assert isinstance(valid, PolicySpec) and valid.deployment == TARGET["deployment"]
    bad = {"target": TARGET, "enabled": "yes"}
    refused = parse_policy_spec({"spec": bad})
    assert isinstance(refused, InvalidSpecError)
    assert refused.problems == parse_spec_problems(bad)
    assert isinstance(parse_policy_spec({}), InvalidSpecError)  # no spec: no target


def parse_spec_problems(spec: dict[str, object]) -> list[str]:
    """The problems `parse_spec` raises for `spec` (what the value form must carry)."""
    try:
        parse_spec(spec)
    except InvalidSpecError as exc:
        return exc.problems
    raise AssertionError(f"{spec!r} parsed")
