"""The evaluator: run records + matrix -> the verdict of docs/reference.md §3-4.

`evaluate` (in `core`) is the entry point; the verdict is one pydantic schema
(`results.verdict`, whose `to_json()` is verdict.json); each acceptance criterion is
its own module behind one interface (`walker.Criterion`), walked cell by
cell by `walker.CellCriterion`. The median is `stats.median`, the one the
whole harness uses.
"""

from __future__ import annotations

from spillover_harness import stats
from spillover_harness.evaluate.core import evaluate
from spillover_harness.evaluate.criteria import ALL_CRITERIA, CRITERION_TITLES
from spillover_harness.evaluate.decide import decision_values
from spillover_harness.evaluate.input_tokens import token_limit
from spillover_harness.evaluate.walker import Criterion, combine
from spillover_harness.results.verdict import (
    CRITERIA,
    DECISION_INCONCLUSIVE,
    FAIL,
    INCONCLUSIVE,
    PASS,
    Advisory,
    CellEvidence,
    CellSummary,
    ConfigVerdict,
    CriterionResult,
    Incomplete,
    IncompleteCell,
    RunsNeeded,
    Status,
    TokenRatio,
    Verdict,
)
from spillover_harness.stats import median

__all__ = [
    "ALL_CRITERIA",
    "CRITERIA",
    "CRITERION_TITLES",
    "DECISION_INCONCLUSIVE",
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "Advisory",
    "CellEvidence",
    "CellSummary",
    "ConfigVerdict",
    "Criterion",
    "CriterionResult",
    "Incomplete",
    "IncompleteCell",
    "RunsNeeded",
    "Status",
    "TokenRatio",
    "Verdict",
    "combine",
    "decision_values",
    "evaluate",
    "median",
    "stats",
    "token_limit",
]
