"""Run records for the evaluator and report tests.

Each test module says what a good run of its own looks like (`GoodRun`); building
the record and laying out a whole dataset over the default matrix is done here once.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from typing import Any

from spillover_harness.matrix import load_matrix
from spillover_harness.records import RunRecord

MATRIX = load_matrix(None)
CELLS = [(r.name, i.name, i.size_class) for r, i in MATRIX.cells()]
CONFIGS = [c.name for c in MATRIX.configurations]

Spec = dict[str, Any]
CellKey = tuple[str, str, str]
GoodRun = Callable[[str], Spec]  # configuration name -> the measured fields of a good run

_ids = count(1)


def next_id() -> int:
    return next(_ids)


def make_record(
    good_run: GoodRun, config: str, recipe: str, inp: str, *, stage: str = "sim", **fields: Any
) -> RunRecord:
    """One record: a good run of `config` unless `fields` says otherwise."""
    outcome = fields.pop("outcome", "succeeded")
    size = fields.pop("size_class", MATRIX.size_class(recipe, inp) or "small")
    measured: Spec = {} if outcome == "harness_error" else good_run(config)
    measured.update(fields)
    n = next_id()
    return RunRecord(
        run_id=f"run-{n}",
        stage=stage,  # type: ignore[arg-type]
        config=config,
        recipe=recipe,
        input=inp,
        size_class=size,
        repetition=measured.pop("repetition", n),
        outcome=outcome,
        started_at="2026-11-30T10:00:00+00:00",
        finished_at="2026-11-30T10:01:00+00:00",
        **measured,
    )


def make_dataset(
    rec: Callable[..., RunRecord],
    cells: dict[CellKey, list[Spec]] | None = None,
    *,
    n: int = 2,
    stage: str = "sim",
    configs: list[str] | None = None,
) -> list[RunRecord]:
    """Every configuration x cell with `n` good runs, except the cells given (their specs)."""
    cells = cells or {}
    out: list[RunRecord] = []
    for cfg in configs or CONFIGS:
        for recipe, inp, _ in CELLS:
            specs = cells.get((cfg, recipe, inp), [{} for _ in range(n)])
            out.extend(rec(cfg, recipe, inp, stage=stage, **spec) for spec in specs)
    return out
