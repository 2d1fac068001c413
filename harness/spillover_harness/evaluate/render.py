"""How a criterion shows its evidence in report.md: the interface and the default.

report.py walks the criteria a verdict holds and asks each one for its cells
(`CriterionView.cell_text`) and for any line to print under its rule
(`CriterionView.rule_notes`); it never branches on a criterion's key. A
criterion that does not say how to show itself (`walker.CellCriterion`'s
defaults) shows its evidence's numbers (`value`, `baseline_value`, `limit`,
`comparison`) as they are, so a new criterion renders without touching the
report; a key the report has no criterion for gets `DefaultView`. Pure text,
no Markdown escaping (the report escapes the cells).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from spillover_harness.results.verdict import CellEvidence

__all__ = [
    "CellText",
    "CriterionView",
    "DefaultView",
    "default_cell_text",
    "number",
    "ratio",
    "view_for",
]


def number(value: float | Fraction | None, digits: int = 2) -> str:
    """A figure for a table: thousands separated, whole numbers without decimals."""
    if value is None:
        return "n/a"
    if isinstance(value, Fraction) and value.denominator == 1:
        return f"{value.numerator:,}"
    as_float = float(value)
    if as_float.is_integer():
        return f"{int(as_float):,}"
    return f"{as_float:,.{digits}f}".rstrip("0").rstrip(".")


def ratio(num: int, den: int, empty: str = "n/a") -> str:
    """`num/den (pct%)`, or `empty` when there is no denominator."""
    if den == 0:
        return empty
    return f"{num}/{den} ({100 * num / den:.1f}%)"


@dataclass(frozen=True)
class CellText:
    """One evidence row's figures as text: the configuration's, the baseline's, the limit."""

    value: str
    baseline_value: str
    limit: str


class CriterionView(Protocol):
    """What the report needs from a criterion to show it."""

    @property
    def key(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def with_baseline(self) -> bool:
        """Whether the baseline's runs are part of the evidence (n and harness_error
        columns show both sides)."""
        ...

    def cell_text(self, ev: CellEvidence, baseline: str) -> CellText: ...

    def rule_notes(self, baseline: str, tolerance: Fraction) -> list[str]: ...


def default_cell_text(ev: CellEvidence, *, with_baseline: bool) -> CellText:
    """Any criterion's row from its evidence's numbers, as they are."""
    limit = number(ev.limit)
    return CellText(
        value=number(ev.value),
        baseline_value=number(ev.baseline_value) if with_baseline else "not judged",
        limit=f"{limit} ({ev.comparison})" if ev.limit is not None else ev.comparison,
    )


@dataclass(frozen=True)
class DefaultView:
    """The view of a criterion key the report has no criterion for (a verdict written
    by newer code): titled after its key, cells from the numbers."""

    key: str
    with_baseline: bool = True

    @property
    def title(self) -> str:
        return self.key.replace("_", " ").capitalize()

    def cell_text(self, ev: CellEvidence, baseline: str) -> CellText:
        return default_cell_text(ev, with_baseline=self.with_baseline)

    def rule_notes(self, baseline: str, tolerance: Fraction) -> list[str]:
        return []


def view_for(key: str, known: Mapping[str, CriterionView]) -> CriterionView:
    """The view of criterion `key`: its own, else the default one titled after the key."""
    view = known.get(key)
    return view if view is not None else DefaultView(key)
