"""The values on the mcp-host pods compared with a configuration, and the wait for
stale pods (the pod list comes from a function here; the real API in
tests/integration/test_cluster_pods.py)."""

from __future__ import annotations

import pytest
from spillover_harness.cluster.recipe_pods import (
    PodValues,
    RecipePodsStale,
    effective,
    pods_condition,
    stale,
    wait_current,
)
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR

OFF = {ENABLED_VAR: "false", THRESHOLD_VAR: None, BUDGET_VAR: None}
ON = {ENABLED_VAR: "true", THRESHOLD_VAR: None, BUDGET_VAR: None}


def pod(name: str, **values: str | None) -> PodValues:
    env = {ENABLED_VAR: None, THRESHOLD_VAR: None, BUDGET_VAR: None}
    env.update({k: v for k, v in values.items()})
    return PodValues(name, f"uid-{name}", env)


def test_unset_empty_or_invalid_is_the_default_the_mcp_host_runs() -> None:
    defaults = {ENABLED_VAR: "true", THRESHOLD_VAR: "131072", BUDGET_VAR: "16777216"}
    assert effective({ENABLED_VAR: None}) == defaults
    assert effective({ENABLED_VAR: "", THRESHOLD_VAR: ""}) == defaults
    assert effective({THRESHOLD_VAR: "100", BUDGET_VAR: "lots"}) == defaults  # invalid
    assert effective({ENABLED_VAR: "false"})[ENABLED_VAR] == "false"


def test_an_explicit_default_threshold_is_the_shipped_configuration() -> None:
    """The operator writes THRESHOLD=131072 when an envFrom source would otherwise set
    it: the pod runs the `128KiB` configuration (threshold unset) all the same, as the
    operator's recipe-pod check says (one meaning: spillover_operator.domain.mcp_host)."""
    assert stale(ON, [pod("d", **{THRESHOLD_VAR: "131072"})]) == []
    assert [p.name for p, _ in stale(ON, [pod("e", **{THRESHOLD_VAR: "32768"})])] == ["e"]


def test_stale_names_each_pod_and_what_differs() -> None:
    pods = [pod("a", **{ENABLED_VAR: "false"}), pod("b"), pod("c", **{THRESHOLD_VAR: "32768"})]
    found = stale(OFF, pods)
    assert [p.name for p, _ in found] == ["b", "c"]
    assert "ENABLED expected 'false', found 'true'" in found[0][1]
    assert stale(ON, [pod("b")]) == []
    assert stale({**ON, THRESHOLD_VAR: "32768"}, [pod("c", **{THRESHOLD_VAR: "32768"})]) == []


def test_an_unknown_value_is_never_current() -> None:
    secret = pod("s", **{ENABLED_VAR: "unknown:envFrom secret creds (unreadable)"})
    assert [p.name for p, _ in stale(ON, [secret])] == ["s"]


def test_wait_returns_once_the_pods_are_current() -> None:
    answers = [[pod("old")], [pod("old"), pod("new", **{ENABLED_VAR: "false"})],
               [pod("new", **{ENABLED_VAR: "false"})]]  # fmt: skip
    slept: list[float] = []
    got = wait_current(lambda: answers.pop(0), OFF, what="off", timeout_s=60, sleep=slept.append)
    assert [p.name for p in got] == ["new"] and len(slept) == 2


def test_wait_times_out_naming_the_stale_pods_and_the_operators_condition() -> None:
    condition = {"type": "RecipePodsCurrent", "status": "False", "reason": "Stale",
                 "message": "1 stale"}  # fmt: skip
    with pytest.raises(RecipePodsStale) as err:
        wait_current(
            lambda: [pod("mcp-host-7d9", **{THRESHOLD_VAR: "65536"})],
            ON,
            what="configuration '128KiB'",
            timeout_s=0.01,
            condition=lambda: condition,
            sleep=lambda _s: None,
            interval_s=0.0,
        )
    text = str(err.value)
    assert "mcp-host-7d9" in text and "THRESHOLD expected unset, found '65536'" in text
    assert "RecipePodsCurrent condition is False (Stale)" in text
    assert "No run of this configuration was made" in text


def test_the_condition_is_read_defensively() -> None:
    assert pods_condition({}) is None
    assert pods_condition({"status": {"conditions": [{"type": "Ready"}, "junk"]}}) is None
    cond = {"type": "RecipePodsCurrent", "status": "True"}
    assert pods_condition({"status": {"conditions": [cond]}}) == cond
