"""The five acceptance criteria of docs/reference.md §3, in the reference's order."""

from __future__ import annotations

from spillover_harness.evaluate.input_tokens import InputTokens
from spillover_harness.evaluate.iteration_limit import IterationLimit
from spillover_harness.evaluate.no_leak import NoLeak
from spillover_harness.evaluate.success_rate import SuccessRate
from spillover_harness.evaluate.summary_quality import SummaryQuality
from spillover_harness.evaluate.walker import Criterion
from spillover_harness.results.verdict import CRITERIA

ALL_CRITERIA: tuple[Criterion, ...] = (
    SuccessRate(),
    IterationLimit(),
    InputTokens(),
    SummaryQuality(),
    NoLeak(),
)
assert tuple(c.key for c in ALL_CRITERIA) == CRITERIA

CRITERION_TITLES: dict[str, str] = {c.key: c.title for c in ALL_CRITERIA}
