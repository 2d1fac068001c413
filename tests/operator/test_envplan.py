"""render_env, merge_passthrough, select_container, effective_env, plan_apply/plan_remove."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from spillover_operator.constants import (
    BUDGET_VAR,
    ENABLED_VAR,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    THRESHOLD_VAR,
)
from spillover_operator.envplan import (
    EnvChange,
    TargetError,
    UnmanageableTargetError,
    effective_env,
    merge_passthrough,
    plan_apply,
    plan_remove,
    render_env,
    select_container,
)
from spillover_operator.policy import PolicySpec

ALL = ",".join(SPILLOVER_VARS)


def spec(
    enabled: bool = True,
    threshold: int | None = None,
    budget: int | None = None,
    container: str | None = None,
) -> PolicySpec:
    return PolicySpec(enabled, threshold, budget, "wrc", container, "Retain")


def deployment(*containers: dict[str, Any], rv: str | None = "42") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "wrc", "namespace": "clerum"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {"template": {"spec": {"containers": list(containers)}}},
    }


def container(name: str, env: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": f"{name}:1", **extra}
    if env is not None:
        body["env"] = env
    return body


# ---- render_env -------------------------------------------------------------------


def test_render_env_default_writes_enabled_true_explicitly() -> None:
    assert render_env(spec()) == {ENABLED_VAR: "true", THRESHOLD_VAR: None, BUDGET_VAR: None}


def test_render_env_kill_switch() -> None:
    assert render_env(spec(enabled=False))[ENABLED_VAR] == "false"


def test_render_env_values() -> None:
    assert render_env(spec(threshold=32768, budget=2097152)) == {
        ENABLED_VAR: "true",
        THRESHOLD_VAR: "32768",
        BUDGET_VAR: "2097152",
    }


# ---- merge_passthrough --------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (None, ALL),
        ("", ALL),
        ("   ", ALL),
        (",,,", ALL),
        ("FOO", f"FOO,{ALL}"),
        ("FOO,BAR", f"FOO,BAR,{ALL}"),
        (f"FOO,{ENABLED_VAR},BAR", f"FOO,{ENABLED_VAR},BAR,{THRESHOLD_VAR},{BUDGET_VAR}"),
        (
            f"{BUDGET_VAR},{ENABLED_VAR},{THRESHOLD_VAR}",
            f"{BUDGET_VAR},{ENABLED_VAR},{THRESHOLD_VAR}",
        ),
        (ALL, ALL),
        (" FOO , BAR ,", f"FOO,BAR,{ALL}"),
        ("FOO,FOO,BAR,FOO", f"FOO,BAR,{ALL}"),
        (f"{ENABLED_VAR},{ENABLED_VAR}", ALL),
        ("B,A,C", f"B,A,C,{ALL}"),
    ],
)
def test_merge_passthrough(current: str | None, expected: str) -> None:
    assert merge_passthrough(current) == expected


def test_merge_passthrough_custom_required() -> None:
    assert merge_passthrough("A", ["B", "A"]) == "A,B"


# ---- select_container / effective_env ----------------------------------------------


def test_select_container_default_is_first() -> None:
    dep = deployment(container("wrc"), container("sidecar"))
    assert select_container(dep, None)["name"] == "wrc"
    assert select_container(dep, "sidecar")["name"] == "sidecar"


def test_select_container_missing_names_the_existing_ones() -> None:
    dep = deployment(container("wrc"), container("sidecar"))
    with pytest.raises(TargetError, match=r"'nope' not found .* containers are: wrc, sidecar"):
        select_container(dep, "nope")


def test_select_container_no_containers() -> None:
    with pytest.raises(TargetError, match="has no containers"):
        select_container({"metadata": {"name": "x"}, "spec": {}}, None)


def test_effective_env() -> None:
    dep = deployment(
        container(
            "wrc",
            [
                {"name": "OTHER", "value": "secret-ish"},
                {"name": ENABLED_VAR, "value": "false"},
                {
                    "name": THRESHOLD_VAR,
                    "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}},
                },
                {"name": PASSTHROUGH_VAR, "value": "A,B"},
            ],
        )
    )
    assert effective_env(dep, None) == {
        ENABLED_VAR: "false",
        THRESHOLD_VAR: "<valueFrom>",
        BUDGET_VAR: None,
        PASSTHROUGH_VAR: "A,B",
    }


def test_effective_env_empty_value_and_duplicates() -> None:
    dep = deployment(
        container(
            "wrc",
            [
                {"name": ENABLED_VAR},
                {"name": BUDGET_VAR, "value": "1"},
                {"name": BUDGET_VAR, "value": "2"},
            ],
        )
    )
    env = effective_env(dep, "wrc")
    assert env[ENABLED_VAR] == ""
    assert env[BUDGET_VAR] == "2"  # the last entry wins, as in the pod


# ---- plan_apply ---------------------------------------------------------------------


def _env_patch(plan_patch: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    (entry,) = plan_patch["spec"]["template"]["spec"]["containers"]
    return entry["name"], entry["env"]


def test_plan_apply_on_absent_env_list() -> None:
    dep = deployment(container("wrc"))
    plan = plan_apply(dep, spec(threshold=32768))
    assert plan.patch is not None
    assert plan.patch["metadata"] == {"resourceVersion": "42"}
    name, env = _env_patch(plan.patch)
    assert name == "wrc"
    assert env == [
        {"name": ENABLED_VAR, "value": "true"},
        {"name": THRESHOLD_VAR, "value": "32768"},
        {"name": PASSTHROUGH_VAR, "value": ALL},
    ]
    assert plan.changes == [
        EnvChange(ENABLED_VAR, None, "true"),
        EnvChange(THRESHOLD_VAR, None, "32768"),
        EnvChange(PASSTHROUGH_VAR, None, ALL),
    ]


def test_plan_apply_is_idempotent() -> None:
    dep = deployment(
        container(
            "wrc",
            [
                {"name": "A", "value": "1"},
                {"name": ENABLED_VAR, "value": "true"},
                {"name": THRESHOLD_VAR, "value": "32768"},
                {"name": PASSTHROUGH_VAR, "value": f"X, {ALL} ,Y"},
            ],
        )
    )
    plan = plan_apply(dep, spec(threshold=32768))
    assert plan.patch is None
    assert plan.changes == []
    assert plan.noop


def test_plan_apply_only_touches_the_target_container_and_managed_vars() -> None:
    dep = deployment(
        container("sidecar", [{"name": ENABLED_VAR, "value": "whatever"}]),
        container("wrc", [{"name": "A", "value": "1"}, {"name": PASSTHROUGH_VAR, "value": "A"}]),
    )
    before = copy.deepcopy(dep)
    plan = plan_apply(dep, spec(enabled=False, container="wrc"))
    assert dep == before  # pure: the input is not modified
    assert plan.patch is not None
    name, env = _env_patch(plan.patch)
    assert name == "wrc"
    # In the order the env list will have (the API server insists): existing entries
    # where they are, new ones after them.
    assert env == [
        {"name": PASSTHROUGH_VAR, "value": f"A,{ALL}"},
        {"name": ENABLED_VAR, "value": "false"},
    ]


def test_plan_apply_removes_unset_values() -> None:
    dep = deployment(
        container(
            "wrc",
            [
                {"name": ENABLED_VAR, "value": "true"},
                {"name": THRESHOLD_VAR, "value": "32768"},
                {"name": BUDGET_VAR, "value": "2097152"},
                {"name": PASSTHROUGH_VAR, "value": ALL},
            ],
        )
    )
    plan = plan_apply(dep, spec())
    assert plan.patch is not None
    _, env = _env_patch(plan.patch)
    assert env == [
        {"name": THRESHOLD_VAR, "$patch": "delete"},
        {"name": BUDGET_VAR, "$patch": "delete"},
    ]
    assert plan.changes == [
        EnvChange(THRESHOLD_VAR, "32768", None),
        EnvChange(BUDGET_VAR, "2097152", None),
    ]


def test_plan_apply_replaces_value_from_with_null() -> None:
    ref = {"configMapKeyRef": {"name": "c", "key": "k"}}
    dep = deployment(
        container(
            "wrc",
            [{"name": ENABLED_VAR, "valueFrom": ref}, {"name": PASSTHROUGH_VAR, "value": ALL}],
        )
    )
    plan = plan_apply(dep, spec())
    assert plan.patch is not None
    _, env = _env_patch(plan.patch)
    assert env == [{"name": ENABLED_VAR, "value": "true", "valueFrom": None}]
    assert plan.changes == [EnvChange(ENABLED_VAR, "<valueFrom>", "true")]


def test_plan_apply_value_from_that_happens_to_equal_is_still_replaced() -> None:
    # "<valueFrom>" is a display marker, never a match for a literal value.
    dep = deployment(
        container(
            "wrc",
            [{"name": ENABLED_VAR, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        )
    )
    plan = plan_apply(dep, spec())
    assert plan.patch is not None
    assert EnvChange(ENABLED_VAR, "<valueFrom>", "true") in plan.changes


def test_plan_apply_passthrough_from_value_from_is_refused() -> None:
    dep = deployment(
        container(
            "wrc",
            [
                {
                    "name": PASSTHROUGH_VAR,
                    "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}},
                }
            ],
        )
    )
    with pytest.raises(UnmanageableTargetError, match="valueFrom"):
        plan_apply(dep, spec())


def test_plan_apply_empty_value_is_a_difference() -> None:
    dep = deployment(
        container("wrc", [{"name": ENABLED_VAR}, {"name": PASSTHROUGH_VAR, "value": ALL}])
    )
    plan = plan_apply(dep, spec())
    assert plan.changes == [EnvChange(ENABLED_VAR, "", "true")]


def test_plan_apply_without_resource_version_has_no_metadata() -> None:
    plan = plan_apply(deployment(container("wrc"), rv=None), spec())
    assert plan.patch is not None
    assert "metadata" not in plan.patch


def test_plan_apply_missing_container() -> None:
    with pytest.raises(TargetError, match="'other' not found"):
        plan_apply(deployment(container("wrc")), spec(container="other"))


# ---- plan_remove --------------------------------------------------------------------


def test_plan_remove_keeps_passthrough() -> None:
    dep = deployment(
        container(
            "wrc",
            [
                {"name": "A", "value": "1"},
                {"name": ENABLED_VAR, "value": "false"},
                {"name": BUDGET_VAR, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": PASSTHROUGH_VAR, "value": ALL},
            ],
        )
    )
    plan = plan_remove(dep, spec())
    assert plan.patch is not None
    _, env = _env_patch(plan.patch)
    assert env == [
        {"name": ENABLED_VAR, "$patch": "delete"},
        {"name": BUDGET_VAR, "$patch": "delete"},
    ]
    assert plan.changes == [
        EnvChange(ENABLED_VAR, "false", None),
        EnvChange(BUDGET_VAR, "<valueFrom>", None),
    ]


def test_plan_remove_nothing_to_remove() -> None:
    dep = deployment(container("wrc", [{"name": PASSTHROUGH_VAR, "value": ALL}]))
    assert plan_remove(dep, spec()).patch is None
    assert plan_remove(deployment(container("wrc")), spec()).patch is None


def test_patch_pins_the_order_of_containers_and_env() -> None:
    dep = deployment(
        container("proxy"),
        container(
            "wrc",
            [
                {"name": "A", "value": "1"},
                {"name": THRESHOLD_VAR, "value": "5000"},
                {"name": "A", "value": "again"},
                {"name": "Z", "value": "z"},
            ],
        ),
    )
    plan = plan_apply(dep, spec(container="wrc"))
    assert plan.patch is not None
    pod = plan.patch["spec"]["template"]["spec"]
    assert pod["$setElementOrder/containers"] == [{"name": "proxy"}, {"name": "wrc"}]
    (entry,) = pod["containers"]
    # Existing names keep their places (the removed one is gone), new ones are appended.
    assert entry["$setElementOrder/env"] == [
        {"name": "A"},
        {"name": "Z"},
        {"name": ENABLED_VAR},
        {"name": PASSTHROUGH_VAR},
    ]


# ---- envFrom on the WRC container ----------------------------------------------------


def test_an_unset_field_shadowed_by_envfrom_is_written_as_the_default() -> None:
    from spillover_operator.envplan import envfrom_shadowed, shadow_notes

    dep = deployment(container("wrc"))
    dep["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "tuning"}},
        {"secretRef": {"name": "creds"}, "prefix": "CLERUM_WORKFLOW_TOOL_SPILLOVER_BUD"},
    ]
    maps = {"tuning": {THRESHOLD_VAR: "4096"}}
    shadowed = envfrom_shadowed(dep, None, maps.get)
    assert shadowed[THRESHOLD_VAR].value == "4096"
    assert shadowed[BUDGET_VAR].state == "unknown"
    assert render_env(spec(), shadowed) == {
        ENABLED_VAR: "true",
        THRESHOLD_VAR: "131072",
        BUDGET_VAR: "16777216",
    }
    # A field the spec sets is written as it says.
    assert render_env(spec(threshold=32768), shadowed)[THRESHOLD_VAR] == "32768"
    plan = plan_apply(dep, spec(), shadowed)
    assert {c.name: c.after for c in plan.changes}[THRESHOLD_VAR] == "131072"
    notes = shadow_notes(spec(), shadowed)
    assert any(n.startswith(f"envFrom configMap tuning sets {THRESHOLD_VAR}=4096") for n in notes)
    assert any("value unknown" in n for n in notes)
    assert shadow_notes(spec(threshold=32768, budget=2097152), shadowed) == []


def test_a_value_change_alone_may_go_without_the_resource_version() -> None:
    """The kill switch on an applied Deployment: only ENABLED's value changes, merged by
    name, so the operator's first move need not be refused because the Deployment's
    status moved since the read."""
    applied = [
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": ENABLED_VAR, "value": "true"},
        {"name": PASSTHROUGH_VAR, "value": ALL},
    ]
    plan = plan_apply(deployment(container("wrc", applied)), spec(enabled=False))
    assert plan.patch is not None and plan.values_only
    assert plan.patch["metadata"] == {"resourceVersion": "42"}  # by default, as always
    bare = plan.unconditional()
    assert bare is not None and "metadata" not in bare
    assert _env_patch(bare)[1] == [{"name": ENABLED_VAR, "value": "false"}]


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ([{"name": ENABLED_VAR, "value": "true"}], spec(enabled=False)),  # passthrough added
        (  # a removal (threshold unset in the spec)
            [
                {"name": ENABLED_VAR, "value": "true"},
                {"name": THRESHOLD_VAR, "value": "1"},
                {"name": PASSTHROUGH_VAR, "value": ALL},
            ],
            spec(),
        ),
        (  # a valueFrom replaced
            [
                {"name": ENABLED_VAR, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                {"name": PASSTHROUGH_VAR, "value": ALL},
            ],
            spec(enabled=False),
        ),
    ],
)
def test_a_change_computed_from_what_was_read_keeps_the_precondition(
    env: list[dict[str, Any]], want: PolicySpec
) -> None:
    plan = plan_apply(deployment(container("wrc", env)), want)
    assert plan.patch is not None and not plan.values_only
    assert plan.unconditional() == plan.patch
    assert plan.patch["metadata"] == {"resourceVersion": "42"}
