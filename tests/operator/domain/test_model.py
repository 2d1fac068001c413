"""The CRD the API server enforces agrees with the policy model (`model.py`): every
spec field, its bounds, its enum values and its status key. A field added to the model
and not to manifests/crd (or the other way round) fails here, naming the schema the
model wants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from spillover_operator.domain import model
from spillover_operator.domain.constants import DNS1123_LABEL, DNS1123_SUBDOMAIN
from spillover_operator.domain.model import ENV_FIELDS, EnvField

CRD = Path(__file__).resolve().parents[3] / "manifests" / "crd" / "spilloverpolicies.yaml"


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]
    return schema


def _wanted(f: EnvField) -> dict[str, Any]:
    """The schema properties of an EnvField the model fixes (descriptions are prose)."""
    if f.kind == "switch":
        # Required with no default: client-side `kubectl apply` drops `enabled: null`,
        # and a default would then turn the kill switch ON.
        return {"type": "boolean", "default": None, "enum": [True, False]}
    return {"type": "integer", "format": "int64", "minimum": f.low, "maximum": f.high}


def test_the_spec_properties_are_the_model_keys() -> None:
    assert sorted(_schema()["spec"]["properties"]) == sorted(model.SPEC_KEYS)


def test_the_kill_switch_field_is_required() -> None:
    assert sorted(_schema()["spec"]["required"]) == ["enabled", "target"]


@pytest.mark.parametrize("f", ENV_FIELDS, ids=lambda f: f.key)
def test_each_env_field_has_the_model_schema(f: EnvField) -> None:
    prop = _schema()["spec"]["properties"].get(f.key)
    assert prop is not None, f"manifests/crd: spec.properties.{f.key} missing; want {_wanted(f)}"
    got = {k: prop.get(k) for k in _wanted(f)}
    assert got == _wanted(f), f"spec.properties.{f.key}: CRD {got}, model wants {_wanted(f)}"
    # The description names the variable and, for a size, the mcp-host default.
    assert f.var in prop["description"]
    if f.kind == "bytes":
        assert f"({f.default}," in prop["description"]


def test_status_effective_has_a_key_per_variable() -> None:
    effective = _schema()["status"]["properties"]["effective"]["properties"]
    assert sorted(effective) == sorted(model.STATUS_KEYS.values())
    assert all(prop["type"] == "string" for prop in effective.values())


def test_enums_and_names_agree() -> None:
    spec = _schema()["spec"]["properties"]
    assert spec["onDelete"]["enum"] == list(model.ON_DELETE_VALUES)
    assert spec["onDelete"]["default"] == "Retain"
    recipe = spec["recipePods"]["properties"]
    assert sorted(recipe) == sorted(model.RECIPE_POD_KEYS)
    assert recipe["refresh"]["enum"] == list(model.REFRESH_VALUES)
    assert recipe["refresh"]["default"] == "Never"
    target = spec["target"]["properties"]
    assert sorted(target) == sorted(model.TARGET_KEYS)
    assert (target["deployment"]["pattern"], target["deployment"]["maxLength"]) == (
        DNS1123_SUBDOMAIN,
        253,
    )
    assert (target["container"]["pattern"], target["container"]["maxLength"]) == (
        DNS1123_LABEL,
        63,
    )


def test_nothing_a_writer_sends_is_pruned_or_defaulted_without_a_word() -> None:
    """Issue 39: the policy's own objects keep unknown fields (the admission policy
    spillover-policy-fields refuses them, the operator too: InvalidSpec), an explicit
    `refresh: null` is kept to be refused rather than defaulted to Never, and a size
    sent with a fraction (65536.0) meets a rule that refuses it."""
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    (version,) = crd["spec"]["versions"]
    root = version["schema"]["openAPIV3Schema"]
    spec = root["properties"]["spec"]
    recipe = spec["properties"]["recipePods"]
    selector = recipe["properties"]["selector"]
    objects = {
        "(root)": root,
        "spec": spec,
        "spec.target": spec["properties"]["target"],
        "spec.recipePods": recipe,
        "spec.recipePods.selector": selector,
        "spec.recipePods.selector.matchExpressions[]": selector["properties"]["matchExpressions"][
            "items"
        ],
    }
    for path, schema in objects.items():
        assert schema.get("x-kubernetes-preserve-unknown-fields") is True, path
    # status is the operator's: pruned as usual.
    assert "x-kubernetes-preserve-unknown-fields" not in root["properties"]["status"]
    refresh = recipe["properties"]["refresh"]
    assert refresh["nullable"] is True and None not in refresh["enum"]
    for f in ENV_FIELDS:
        if f.kind == "bytes":
            rules = spec["properties"][f.key]["x-kubernetes-validations"]
            assert [r["rule"] for r in rules] == ["type(self) == int"], f.key
            assert "65536, not 65536.0" in rules[0]["message"]


def test_status_last_change_dates_a_change_by_the_operators_report_only() -> None:
    last = _schema()["status"]["properties"]["lastChange"]["properties"]
    assert sorted(last) == ["generation", "note", "reason", "recorded", "seenAt", "tool", "user"]


def test_every_recipe_pods_reason_is_listed_in_the_crd() -> None:
    text = " ".join(_schema()["status"]["properties"]["conditions"]["description"].split())
    for reason in (
        model.REASON_ALL_CURRENT,
        model.REASON_STALE,
        model.REASON_STALE_AFTER_REFRESH,
        model.REASON_CONTAINER_NOT_FOUND,
        model.REASON_UNKNOWN,
        model.REASON_NO_PODS,
    ):
        assert reason in text, reason


def test_the_mapping_is_one_to_one() -> None:
    """Each field has its own variable, key and flag: the lookups cannot collide."""
    for attr in ("key", "attr", "var"):
        values = [getattr(f, attr) for f in ENV_FIELDS]
        assert len(set(values)) == len(values), attr
    flags = [f.flag for f in ENV_FIELDS if f.flag is not None]
    assert len(set(flags)) == len(flags)
    assert tuple(f.var for f in ENV_FIELDS) == model.SPILLOVER_VARS
    assert {f.attr for f in ENV_FIELDS} <= set(model.PolicySpec.__dataclass_fields__)


def test_reasons_are_each_in_at_most_one_group() -> None:
    assert not set(model.REFUSED_REASONS) & set(model.PENDING_REASONS)
    assert model.REASON_TARGET_NOT_ALLOWED in model.REFUSED_REASONS


# Strings equal to a model name that mean something else, where they are written.
_OTHER_MEANINGS = {
    ("operator/spillover_operator/client/__init__.py", "Conflict"),  # the error class
    ("harness/spillover_harness/sim/wrc.py", "Ready"),  # a pod's Ready condition
    ("harness/spillover_harness/cluster/preflight.py", "Ready"),  # a pod's Ready condition
}


def _string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, value) of each string constant in `path` that is not a docstring."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_condition_types_reasons_and_event_names_are_written_only_in_the_model() -> None:
    """Issue 20: each condition type, reason and Event name exists once. A literal copy
    elsewhere in the operator or the harness fails here with its file and line."""
    root = CRD.parents[2]
    names = {
        value: name
        for name, value in vars(model).items()
        if name.startswith(("REASON_", "COND_", "EVENT_")) and isinstance(value, str)
    }
    assert len(names) >= 20, "the model lost its reasons"
    copies = [
        f"{path.relative_to(root)}:{line}: {value!r} (use model.{names[value]})"
        for package in ("operator/spillover_operator", "harness/spillover_harness")
        for path in sorted((root / package).rglob("*.py"))
        if path != Path(model.__file__).resolve()
        for line, value in _string_literals(path)
        if value in names and (str(path.relative_to(root)), value) not in _OTHER_MEANINGS
    ]
    assert not copies, "\n".join(copies)
