"""Recorded fields from a run's log lines, with the cluster profile's patterns.

Pure functions: they get the lines (however they were fetched: the simulator's
`GET /runs/{id}/logs`, or the pods' logs for the run's window through the
Kubernetes API) and return numbers. A field whose pattern never matched is
None ("not measured"), never 0. No function here returns or keeps a log line:
records and reports must never carry tool-result content.

- iterations: the largest `iteration` of the `LLM call started` lines (+1 when
  the platform counts from 0, `iteration_base: 0`);
- input/output tokens: summed over the `LLM response received` lines;
- hit_iteration_limit: True when `Step reached max iterations` appears; False
  when it does not but the step's LLM calls were seen (the logs are the
  step's); None when neither was seen (these were not the step's logs);
- status_report_bytes: the largest `bodyBytes` of the coordinator's lines (the
  biggest status report the run sent);
- budget_inline: 1 when the budget warning appears (the mcp-host logs it once per step
  execution), 0 when it does not and the input could not fill the budget, else None
  with the reason (`budget_reached`): a warning worded otherwise reads "not measured",
  never "budget never reached".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from spillover_harness.profile import LogPatterns


@dataclass(frozen=True)
class LogFields:
    iterations: int | None
    input_tokens: int | None
    output_tokens: int | None
    hit_iteration_limit: bool | None
    status_report_bytes: int | None
    llm_calls: int  # `LLM call started` lines matched
    llm_responses: int  # `LLM response received` lines that matched a token pattern


@lru_cache(maxsize=64)
def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def parse_logs(lines: Iterable[str], patterns: LogPatterns | None = None) -> LogFields:
    """Parse a run's log lines (step and coordinator lines, in any order)."""
    p = patterns if patterns is not None else LogPatterns()
    started, in_tok, out_tok = (
        _re(p.llm_call_started),
        _re(p.llm_response_input_tokens),
        _re(p.llm_response_output_tokens),
    )
    limit, body = _re(p.max_iterations), _re(p.body_bytes)

    max_iteration: int | None = None
    calls = responses = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    hit = False
    body_bytes: int | None = None
    for line in lines:
        if m := started.search(line):
            calls += 1
            value = int(m.group("iteration"))
            max_iteration = value if max_iteration is None else max(max_iteration, value)
        mi, mo = in_tok.search(line), out_tok.search(line)
        if mi:
            input_tokens = (input_tokens or 0) + int(mi.group("input_tokens"))
        if mo:
            output_tokens = (output_tokens or 0) + int(mo.group("output_tokens"))
        if mi or mo:
            responses += 1
        if limit.search(line):
            hit = True
        if mb := body.search(line):
            value = int(mb.group("body_bytes"))
            body_bytes = value if body_bytes is None else max(body_bytes, value)

    iterations = None
    if max_iteration is not None:
        iterations = max_iteration + (1 - p.iteration_base)
    hit_limit: bool | None
    if hit:
        hit_limit = True
    elif calls > 0:
        hit_limit = False
    else:
        hit_limit = None
    return LogFields(
        iterations=iterations,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        hit_iteration_limit=hit_limit,
        status_report_bytes=body_bytes,
        llm_calls=calls,
        llm_responses=responses,
    )


def lines_containing(lines: Iterable[str], marker: str) -> list[str]:
    """The lines that mention `marker` (e.g. a run id), to cut one run out of a shared pod's log."""
    return [line for line in lines if marker in line]


def find_canaries(lines: Iterable[str], canaries: Iterable[str]) -> list[str]:
    """Which canary strings (fixture content markers) occur in the lines.

    Returns the canaries found, sorted, never the lines: a non-empty result
    means tool-result content reached a log (criterion 5, `logs_clean: false`).
    """
    wanted = [c for c in canaries if c]
    found: set[str] = set()
    for line in lines:
        for canary in wanted:
            if canary not in found and canary in line:
                found.add(canary)
    return sorted(found)


@dataclass(frozen=True)
class Attributed:
    """A shared log cut by run: the lines that carry one of our ids, the lines that
    carry no run id at all, and the other runs' ids (their lines are dropped)."""

    mine: list[str]
    unattributed: list[str]
    foreign_ids: frozenset[str]
    foreign_lines: int


def attribute(lines: Iterable[str], ours: Iterable[str], run_id_pattern: str) -> Attributed:
    """Split `lines` by the run id each carries (`run_id_pattern`, group `run_id`); a
    line that names one of `ours` anywhere is ours even when its id field says more."""
    wanted = [o for o in ours if o]
    pattern = _re(run_id_pattern)
    mine: list[str] = []
    loose: list[str] = []
    foreign: set[str] = set()
    foreign_lines = 0
    for line in lines:
        if any(o in line for o in wanted):
            mine.append(line)
            continue
        ids = {m.group("run_id") for m in pattern.finditer(line)}
        if not ids:
            loose.append(line)
        else:
            foreign |= ids
            foreign_lines += 1
    return Attributed(mine, loose, frozenset(foreign), foreign_lines)


def budget_reached(
    lines: Iterable[str] | None, pattern: str | None, may_fill: bool
) -> tuple[int | None, str | None]:
    """The record's `budget_inline` from the step's log lines, and the note that says
    why it is null (docs/reference.md §3.1). `may_fill`: whether the run's input could
    fill the configuration's budget (`checks.consistency.may_fill_budget`; False when spillover is
    off): only then can a missing warning mean that it was worded otherwise."""
    what = "budget_inline"
    if pattern is None:
        return None, f"{what}: the profile reads no budget warning (logs.budget_inline null)"
    if lines is None:
        return None, f"{what}: the step's own log lines were not seen (not measured)"
    if count_matching(lines, pattern):
        return 1, None
    if not may_fill:
        return 0, None
    return None, (
        f"{what}: no line matched the budget warning's pattern though this input could fill "
        "the budget: the mcp-host may word it otherwise (not measured; check the profile's "
        "logs.budget_inline against one real run)"
    )


def count_matching(lines: Iterable[str], pattern: str) -> int:
    """How many lines match `pattern` (one stored result or one read-back per line)."""
    compiled = _re(pattern)
    return sum(1 for line in lines if compiled.search(line))
