"""The consistency checks: off persists nothing, a threshold persists what reaches it
and nothing below, the first-party counters do not move."""

from __future__ import annotations

from functools import cache

from spillover_harness.checks.consistency import (
    FIRST_PARTY,
    FIRST_PARTY_OUTPUT_COUNT,
    FIRST_PARTY_OUTPUT_SUM,
    FIRST_PARTY_PERSISTED,
    check_run,
    first_party_moved,
    may_fill_budget,
    tool_result_sizes,
)
from spillover_harness.fixtures import Fixture, build_fixtures
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR

SEED = 20261130


@cache
def fx(recipe: str, name: str) -> Fixture:
    return build_fixtures(SEED).get(recipe, name)


def env(enabled: str = "true", threshold: str | None = None) -> dict[str, str | None]:
    return {ENABLED_VAR: enabled, THRESHOLD_VAR: threshold, BUDGET_VAR: None}


def test_off_persists_nothing() -> None:
    assert check_run(env("false"), fx("summarize", "document"), 0, "succeeded") == []
    problems = check_run(env("false"), fx("summarize", "document"), 2, "succeeded")
    assert problems and "spillover is off" in problems[0]


def test_not_measured_is_not_checked() -> None:
    assert check_run(env("false"), fx("summarize", "document"), None, "succeeded") is None


def test_below_the_threshold_nothing_is_persisted() -> None:
    doc = fx("summarize", "document")
    assert max(most for _, most in tool_result_sizes(doc)) < 131072  # the medium document
    problems = check_run(env(), doc, 1, "succeeded")
    assert problems and "stays below the threshold 131072" in problems[0]
    assert check_run(env(), doc, 0, "succeeded") == []


def test_results_reaching_the_threshold_are_persisted() -> None:
    doc = fx("summarize", "document")
    assert min(least for least, _ in tool_result_sizes(doc)) >= 32768
    problems = check_run(env(threshold="32768"), doc, 0, "succeeded")
    assert problems and "persisted none" in problems[0]
    assert check_run(env(threshold="32768"), doc, 3, "succeeded") == []
    assert check_run(env(threshold="32768"), doc, 0, "failed") == []  # may not have read it


def test_first_party_counters_must_not_move() -> None:
    assert first_party_moved({FIRST_PARTY_PERSISTED: 0.0}) == []
    assert "moved by 2" in first_party_moved({FIRST_PARTY_PERSISTED: 2.0})[0]


def test_the_first_party_output_histogram_must_not_move() -> None:
    """`clerum_tool_output_bytes` is watched through its count and sum series."""
    assert FIRST_PARTY_OUTPUT_COUNT in FIRST_PARTY and FIRST_PARTY_OUTPUT_SUM in FIRST_PARTY
    assert first_party_moved({FIRST_PARTY_OUTPUT_COUNT: 0.0, FIRST_PARTY_OUTPUT_SUM: 0.0}) == []
    moved = first_party_moved({FIRST_PARTY_OUTPUT_COUNT: 3.0, FIRST_PARTY_OUTPUT_SUM: 409600.0})
    assert len(moved) == 2
    assert moved[0].startswith("clerum_tool_output_bytes_count moved by 3")
    assert moved[1].startswith("clerum_tool_output_bytes_sum moved by 409600")


def test_which_inputs_may_fill_a_budget() -> None:
    """`budget` (~1.5 MB over 128 KiB) fills the smallest budget, 1 MiB, not the default
    16 MiB; the default matrix's large review fills neither; nothing fills a budget at a
    threshold no result reaches."""
    budget, large = fx("code-review", "budget"), fx("code-review", "large")
    mib1 = {ENABLED_VAR: None, THRESHOLD_VAR: None, BUDGET_VAR: "1048576"}
    assert may_fill_budget(mib1, budget)
    assert not may_fill_budget(env(), budget)  # the default 16 MiB
    assert not may_fill_budget(mib1, large)
    assert not may_fill_budget({**mib1, THRESHOLD_VAR: "1048576"}, budget)
    assert not may_fill_budget({**mib1, ENABLED_VAR: "false"}, budget)  # no store at all
