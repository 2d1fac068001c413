"""render_env, merge_passthrough, select_container, effective_env, plan_apply/plan_remove."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from spillover_operator.domain.envplan import (
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
from spillover_operator.domain.model import (
    BUDGET_VAR,
    ENABLED_VAR,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    THRESHOLD_VAR,
    PolicySpec,
)
from spillover_operator.domain.resolved_env import no_config_maps

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
    plan = plan_apply(dep, spec(threshold=32768), config_maps=no_config_maps)
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
    plan = plan_apply(dep, spec(threshold=32768), config_maps=no_config_maps)
    assert plan.patch is None
    assert plan.changes == []
    assert plan.noop


def test_plan_apply_only_touches_the_target_container_and_managed_vars() -> None:
    dep = deployment(
        container("sidecar", [{"name": ENABLED_VAR, "value": "whatever"}]),
        container("wrc", [{"name": "A", "value": "1"}, {"name": PASSTHROUGH_VAR, "value": "A"}]),
    )
    before = copy.deepcopy(dep)
    plan = plan_apply(dep, spec(enabled=False, container="wrc"), config_maps=no_config_maps)
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
    plan = plan_apply(dep, spec(), config_maps=no_config_maps)
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
    plan = plan_apply(dep, spec(), config_maps=no_config_maps)
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
    plan = plan_apply(dep, spec(), config_maps=no_config_maps)
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
        plan_apply(dep, spec(), config_maps=no_config_maps)


def test_plan_apply_empty_value_is_a_difference() -> None:
    dep = deployment(
        container("wrc", [{"name": ENABLED_VAR}, {"name": PASSTHROUGH_VAR, "value": ALL}])
    )
    plan = plan_apply(dep, spec(), config_maps=no_config_maps)
    assert plan.changes == [EnvChange(ENABLED_VAR, "", "true")]


def test_plan_apply_without_resource_version_has_no_metadata() -> None:
    plan = plan_apply(deployment(container("wrc"), rv=None), spec(), config_maps=no_config_maps)
    assert plan.patch is not None
    assert "metadata" not in plan.patch


def test_plan_apply_missing_container() -> None:
    with pytest.raises(TargetError, match="'other' not found"):
        plan_apply(
            deployment(container("wrc")), spec(container="other"), config_maps=no_config_maps
        )


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
    plan = plan_apply(dep, spec(container="wrc"), config_maps=no_config_maps)
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
    from spillover_operator.domain.envplan import envfrom_shadowed, shadow_notes

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
    plan = plan_apply(dep, spec(), config_maps=maps.get)
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
    plan = plan_apply(
        deployment(container("wrc", applied)), spec(enabled=False), config_maps=no_config_maps
    )
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
    plan = plan_apply(deployment(container("wrc", env)), want, config_maps=no_config_maps)
    assert plan.patch is not None and not plan.values_only
    assert plan.unconditional() == plan.patch
    assert plan.patch["metadata"] == {"resourceVersion": "42"}


# ---- the one planning entry point: envFrom always taken into account ----------------


def _with_env_from(env: list[dict[str, Any]], *sources: dict[str, Any]) -> dict[str, Any]:
    return deployment(container("wrc", env, envFrom=list(sources)))


def _applied(dep: dict[str, Any], plan: Any) -> dict[str, Any]:
    """`dep` with the plan's changes made to the target's env (as the API server would)."""
    after = copy.deepcopy(dep)
    target = after["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in target.get("env") or []}
    for change in plan.changes:
        if change.after is None:
            env.pop(change.name, None)
        else:
            env[change.name] = {"name": change.name, "value": change.after}
    target["env"] = list(env.values())
    return after


def test_plan_apply_requires_a_config_map_lookup() -> None:
    """By construction: no caller can plan without saying how envFrom ConfigMaps are read
    (the `--direct` bug of issue 20 was a call that left it out)."""
    import inspect

    param = inspect.signature(plan_apply).parameters["config_maps"]
    assert param.kind is inspect.Parameter.KEYWORD_ONLY
    assert param.default is inspect.Parameter.empty


def test_unsetting_a_field_an_envfrom_configmap_sets_writes_the_default() -> None:
    """The case of issue 20: THRESHOLD=4096 from envFrom, the policy's threshold unset.
    Removing the env entry would leave 4096 in effect; the plan writes the default."""
    from spillover_operator.domain.envplan import resolved_env

    dep = _with_env_from(
        [
            {"name": ENABLED_VAR, "value": "true"},
            {"name": THRESHOLD_VAR, "value": "32768"},
            {"name": PASSTHROUGH_VAR, "value": ALL},
        ],
        {"configMapRef": {"name": "tuning"}},
    )
    maps = {"tuning": {THRESHOLD_VAR: "4096"}}
    plan = plan_apply(dep, spec(), config_maps=maps.get)
    assert plan.changes == [EnvChange(THRESHOLD_VAR, "32768", "131072")]
    in_effect = resolved_env(_applied(dep, plan), None, maps.get)
    assert in_effect[THRESHOLD_VAR].value == "131072"
    assert in_effect[THRESHOLD_VAR].source == "env"
    # Planned again on the result: nothing left to do.
    assert plan_apply(_applied(dep, plan), spec(), config_maps=maps.get).noop


def test_an_envfrom_configmap_without_the_variable_leaves_it_absent() -> None:
    dep = _with_env_from(
        [{"name": THRESHOLD_VAR, "value": "32768"}], {"configMapRef": {"name": "tuning"}}
    )
    plan = plan_apply(dep, spec(), config_maps={"tuning": {"OTHER": "1"}}.get)
    assert {c.name: c.after for c in plan.changes}[THRESHOLD_VAR] is None


def test_an_unreadable_envfrom_source_is_planned_as_if_it_set_the_variable() -> None:
    """A ConfigMap the lookup cannot read (`no_config_maps`: render without the file) or
    a Secret may set anything: the default is written explicitly, never left to it."""
    dep = _with_env_from([], {"configMapRef": {"name": "tuning"}})
    after = {c.name: c.after for c in plan_apply(dep, spec(), config_maps=no_config_maps).changes}
    assert after[THRESHOLD_VAR] == "131072"
    assert after[BUDGET_VAR] == "16777216"
    secret = _with_env_from([], {"secretRef": {"name": "creds"}})
    after = {
        c.name: c.after for c in plan_apply(secret, spec(), config_maps=no_config_maps).changes
    }
    assert after[THRESHOLD_VAR] == "131072"


def test_a_field_the_policy_sets_wins_over_envfrom() -> None:
    dep = _with_env_from([], {"configMapRef": {"name": "tuning"}})
    plan = plan_apply(
        dep, spec(threshold=8192), config_maps={"tuning": {THRESHOLD_VAR: "4096"}}.get
    )
    assert {c.name: c.after for c in plan.changes}[THRESHOLD_VAR] == "8192"


def test_desired_env_is_what_plan_apply_writes() -> None:
    from spillover_operator.domain.envplan import desired_env

    dep = _with_env_from([], {"configMapRef": {"name": "tuning", "optional": True}})
    maps = {"tuning": {BUDGET_VAR: "1"}}
    assert desired_env(dep, spec(enabled=False), maps.get) == {
        ENABLED_VAR: "false",
        THRESHOLD_VAR: None,
        BUDGET_VAR: "16777216",
    }
    # An optional ConfigMap that does not exist sets nothing.
    assert desired_env(dep, spec(), {}.get)[BUDGET_VAR] is None
