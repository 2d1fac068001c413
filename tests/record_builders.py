"""Run records for the evaluator and report tests.

Each test module says what a good run of its own looks like (`GoodRun`); building
the record and laying out a whole dataset over the default matrix is done here once.

Records carry the run_id the runner gives (`records.run_id_for`). In a dataset the
runs of each (configuration, recipe, input) are repetitions 1, 2, ... as the runner
numbers them, so runs of the same cell and repetition pair across configurations
(they share a seed); a lone `make_record` gets a repetition no other record has.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from typing import Any

from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.records import RunKey, RunRecord, run_id_for

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
    repetition = measured.pop("repetition", None) or 1000 + next_id()
    return RunRecord(
        run_id=run_id_for(RunKey(stage, config, recipe, inp, repetition)),
        stage=stage,  # type: ignore[arg-type]
        config=config,
        recipe=recipe,
        input=inp,
        size_class=size,
        repetition=repetition,
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
    """Every configuration x cell with `n` good runs, except the cells given (their specs).

    The runs of a cell are repetitions 1, 2, ... unless a spec says otherwise.
    """
    cells = cells or {}
    out: list[RunRecord] = []
    for cfg in configs or CONFIGS:
        for recipe, inp, _ in CELLS:
            specs = cells.get((cfg, recipe, inp), [{} for _ in range(n)])
            out.extend(
                rec(cfg, recipe, inp, stage=stage, **{"repetition": rep, **spec})
                for rep, spec in enumerate(specs, start=1)
            )
    return out


def plain_good_run(config: str) -> Spec:
    """A good run with every field measured; the baseline reads 1000 input tokens and
    every other configuration 900 (criterion 3 passes, also on large inputs)."""
    return {
        "hit_iteration_limit": False,
        "iterations": 5,
        "input_tokens": 1000 if config == "off" else 900,
        "output_tokens": 100,
        "duration_s": 10.0,
        "spillover_persisted": 0,
        "spillover_reads": 0,
        "status_report_bytes": 2000,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
    }


def plain_record(
    config: str, recipe: str, inp: str, *, stage: str = "sim", **fields: Any
) -> RunRecord:
    """One record of `plain_good_run` unless `fields` says otherwise."""
    return make_record(plain_good_run, config, recipe, inp, stage=stage, **fields)
