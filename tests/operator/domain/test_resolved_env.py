"""resolved_env: a container's variables as the kubelet gives them to the process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from spillover_operator.domain.resolved_env import (
    ConfigMapUnreadable,
    Resolved,
    envfrom_sets,
    expand,
    resolve,
)

T = "CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD"
E = "CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED"
B = "CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET"
NAMES = (E, T, B)

MAPS: dict[str, dict[str, str]] = {
    "tuning": {T: "4096", "OTHER": "x"},
    "short": {"THRESHOLD": "8192", "ENABLED": "false"},
    "later": {T: "65536"},
}


def maps(name: str) -> Mapping[str, str] | None:
    if name == "locked":
        raise ConfigMapUnreadable("ConfigMap locked not readable (Forbidden)")
    return MAPS.get(name)


def values(container: dict[str, Any]) -> dict[str, str]:
    return {k: v.shown() for k, v in resolve(container, NAMES, maps).items()}


def test_plain_env_later_entry_wins_and_absent_is_unset() -> None:
    got = values({"env": [{"name": T, "value": "1"}, {"name": T, "value": "2"}]})
    assert got == {E: "unset", T: "2", B: "unset"}


def test_envfrom_sets_a_value_that_an_empty_env_list_would_hide() -> None:
    """The lie issue 9 found: env says nothing, the process sees 4096."""
    container = {"envFrom": [{"configMapRef": {"name": "tuning"}}]}
    got = resolve(container, NAMES, maps)
    assert got[T] == Resolved("set", "4096", "envFrom configMap tuning")
    assert envfrom_sets(container, NAMES, maps) == {T: got[T]}


def test_prefix_later_envfrom_and_explicit_env_precedence() -> None:
    container = {
        "envFrom": [
            {"configMapRef": {"name": "short"}, "prefix": "CLERUM_WORKFLOW_TOOL_SPILLOVER_"},
            {"configMapRef": {"name": "later"}},
        ],
        "env": [{"name": E, "value": "true"}],
    }
    got = resolve(container, NAMES, maps)
    assert got[T].value == "65536" and got[T].source == "envFrom configMap later"
    assert got[E] == Resolved("set", "true", "env")  # env over envFrom's "false"
    assert got[B].state == "unset"


def test_config_map_key_ref_found_missing_optional_and_required() -> None:
    def ref(name: str, key: str, optional: bool = False) -> dict[str, Any]:
        return {"configMapKeyRef": {"name": name, "key": key, "optional": optional}}

    container = {
        "env": [
            {"name": T, "valueFrom": ref("tuning", T)},
            {"name": E, "valueFrom": ref("nope", "x", optional=True)},
            {"name": B, "valueFrom": ref("tuning", "missing-key")},
        ]
    }
    got = resolve(container, NAMES, maps)
    assert got[T].shown() == "4096"
    assert got[E].state == "unset" and "optional" in got[E].source
    assert got[B].state == "unknown" and "cannot start" in got[B].source


def test_secrets_and_computed_values_are_unknown_never_guessed() -> None:
    container = {
        "envFrom": [{"secretRef": {"name": "creds"}, "prefix": "CLERUM_"}],
        "env": [
            {"name": T, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": B, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
    }
    got = resolve(container, NAMES, maps)
    assert [got[n].state for n in NAMES] == ["unknown", "unknown", "unknown"]
    assert "Secrets are not read" in got[E].source
    assert "fieldRef" in got[B].source


def test_a_secret_whose_prefix_cannot_make_our_names_changes_nothing() -> None:
    container = {"envFrom": [{"secretRef": {"name": "db"}, "prefix": "DB_"}]}
    assert values(container) == {E: "unset", T: "unset", B: "unset"}


def test_unreadable_and_missing_config_maps() -> None:
    assert values({"envFrom": [{"configMapRef": {"name": "locked"}}]})[T] == "unknown"
    # missing and required: the container does not start, so nothing is known
    assert values({"envFrom": [{"configMapRef": {"name": "gone"}}]})[T] == "unknown"
    # missing and optional: nothing set
    assert values({"envFrom": [{"configMapRef": {"name": "gone", "optional": True}}]})[T] == (
        "unset"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [("$(BASE)0", "40960"), ("$$(BASE)", "$(BASE)"), ("$(NOPE)", "$(NOPE)"), ("8", "8")],
)
def test_dependent_variables_expand_like_the_kubelet(value: str, expected: str) -> None:
    env = {"BASE": Resolved("set", "4096", "env")}
    assert expand(value, env) == expected
    container = {"env": [{"name": "BASE", "value": "4096"}, {"name": T, "value": value}]}
    assert resolve(container, NAMES)[T].value == expected
