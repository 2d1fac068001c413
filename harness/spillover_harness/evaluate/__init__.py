"""The evaluator: run records + matrix -> the verdict of docs/reference.md §3-4.

`evaluate` (in `core`) is the entry point; the verdict is one pydantic schema
(`spillover_harness.results.verdict`, whose `to_json()` is verdict.json: import its
names from there); each acceptance criterion is its own module behind one interface
(`walker.Criterion`), walked cell by cell by `walker.CellCriterion`. The median is
`spillover_harness.stats.median`, the one the whole harness uses.
"""

from __future__ import annotations

from spillover_harness.evaluate.core import evaluate
from spillover_harness.evaluate.criteria import ALL_CRITERIA, CRITERION_TITLES
from spillover_harness.evaluate.decide import decision_values
from spillover_harness.evaluate.input_tokens import token_limit
from spillover_harness.evaluate.walker import Criterion, combine

__all__ = [
    "ALL_CRITERIA",
    "CRITERION_TITLES",
    "Criterion",
    "combine",
    "decision_values",
    "evaluate",
    "token_limit",
]
