"""Consistency: is the platform doing what the configuration says?

From the fixture's known tool-result sizes (what the recipe's tools return: the
document for `summarize`; each changed file and its diff for `code-review`):

- under `off` a run persists nothing;
- under a threshold T, a run that succeeded and whose tool results reach T (and fit
  the budget) persisted at least one; a run whose results all stay below T (even
  serialized: at most twice the text plus 1 KiB) persisted none;
- the first-party metrics do not move during workflow runs (a block-level check,
  see `first_party_moved`): the counters `clerum_spillover_persisted_total` and
  `clerum_spillover_reads_total`, and the histogram `clerum_tool_output_bytes`
  (its `_count` and `_sum` series), which the first-party path observes for every
  tool output it sees: a workflow run that moves it went through the first-party path.

A broken check makes the configuration's verdict unable to pass
(`evaluate.decide`). Each function returns the problems found (empty: consistent);
None when the figure it needs was not measured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from spillover_operator.domain.model import BUDGET, ENABLED, THRESHOLD

from spillover_harness.fixtures import CODE_REVIEW, Fixture

FIRST_PARTY_PERSISTED = "clerum_spillover_persisted_total"
FIRST_PARTY_READS = "clerum_spillover_reads_total"
# The first-party histogram of tool output sizes (bytes, label `tool`): Prometheus
# stores it as `_bucket`, `_count` and `_sum` series; the count and the sum move with
# every observation, so those two are the ones watched.
FIRST_PARTY_OUTPUT_BYTES = "clerum_tool_output_bytes"
FIRST_PARTY_OUTPUT_COUNT = f"{FIRST_PARTY_OUTPUT_BYTES}_count"
FIRST_PARTY_OUTPUT_SUM = f"{FIRST_PARTY_OUTPUT_BYTES}_sum"
FIRST_PARTY = (
    FIRST_PARTY_PERSISTED,
    FIRST_PARTY_READS,
    FIRST_PARTY_OUTPUT_COUNT,
    FIRST_PARTY_OUTPUT_SUM,
)

# A tool result is a JSON object holding the text as one string: at most the text as a
# JSON string (every escape, ASCII-only) plus this much for the rest of the object.
ENVELOPE_BYTES = 1024


def _texts(fixture: Fixture) -> list[str]:
    """The texts the recipe's tools return for this input."""
    if fixture.recipe == CODE_REVIEW:
        texts: list[str] = []
        for changed in fixture.changed:
            text = fixture.source(changed.path)
            if text is not None:
                texts.append(text)
            diff = fixture.diffs.get(changed.path)
            if diff is not None:
                texts.append(diff)
        return texts
    return [fixture.document]


def tool_result_sizes(fixture: Fixture) -> list[tuple[int, int]]:
    """(at least, at most) bytes of each tool result of this input: the text's own
    bytes, and the text as an escaped JSON string plus `ENVELOPE_BYTES`."""
    return [
        (len(t.encode("utf-8")), len(json.dumps(t).encode("utf-8")) + ENVELOPE_BYTES)
        for t in _texts(fixture)
    ]


def may_fill_budget(env: Mapping[str, str | None], fixture: Fixture) -> bool:
    """Whether a step on this input, under the configuration `env` (its three variables,
    read as the mcp-host reads them), could find its store's budget full: spillover on,
    and the tool results that could reach the threshold, at their largest, add up to
    more than the budget. Only then can a missing budget warning mean that it was worded
    otherwise (the run's `budget_inline` then reads "not measured" rather than 0)."""
    if ENABLED.read(env.get(ENABLED.var)).value is False:
        return False
    threshold = int(THRESHOLD.read(env.get(THRESHOLD.var)).value)
    budget = int(BUDGET.read(env.get(BUDGET.var)).value)
    return sum(most for _, most in tool_result_sizes(fixture) if most >= threshold) > budget


def check_run(
    env: Mapping[str, str | None],
    fixture: Fixture,
    persisted: int | None,
    outcome: str,
) -> list[str] | None:
    """The problems of one run under the configuration `env` (its three variables);
    None when `persisted` was not measured."""
    if persisted is None:
        return None
    if ENABLED.read(env.get(ENABLED.var)).value is False:
        if persisted:
            return [f"spillover is off, yet the run persisted {persisted} result(s)"]
        return []
    # what the mcp-host runs with (an invalid value: its default)
    threshold = int(THRESHOLD.read(env.get(THRESHOLD.var)).value)
    budget = int(BUDGET.read(env.get(BUDGET.var)).value)
    sizes = tool_result_sizes(fixture)
    if not sizes:
        return []
    if persisted and all(most < threshold for _, most in sizes):
        largest = max(most for _, most in sizes)
        return [
            f"every tool result of {fixture.recipe}/{fixture.input_name} stays below the "
            f"threshold {threshold} (at most {largest} bytes), yet the run persisted {persisted}"
        ]
    over = [least for least, most in sizes if least >= threshold and most <= budget]
    if outcome == "succeeded" and over and not persisted:
        return [
            f"{len(over)} tool result(s) of {fixture.recipe}/{fixture.input_name} reach the "
            f"threshold {threshold} (at least {max(over)} bytes), yet the run persisted none"
        ]
    return []


def first_party_moved(deltas: Mapping[str, float | None]) -> list[str]:
    """The first-party metrics that moved during a block of workflow runs."""
    return [
        f"{name} moved by {value:g} during workflow runs (it belongs to the first-party "
        "spillover, which workflow runs must not feed)"
        for name, value in deltas.items()
        if value
    ]
