"""The decision's stability (`evaluate.stability`): a seeded bootstrap of each cell's runs,
the literal rule and the decision chain applied to every resample. Pinned on hand-made
records; and the vectorized reading of the rule it uses is held equal to the evaluator's
on many random datasets, so the two cannot drift apart."""

from __future__ import annotations

import random
from typing import Any

import pytest
from record_builders import CELLS, CONFIGS, make_dataset, plain_record
from spillover_harness.evaluate import evaluate
from spillover_harness.evaluate.context import Context, group
from spillover_harness.evaluate.rule_draws import observed_statuses
from spillover_harness.evaluate.stability import stability
from spillover_harness.plan.matrix import Matrix, load_matrix
from spillover_harness.results.records import RunRecord

MATRIX = load_matrix(None)


rec = plain_record


def context_of(records: list[RunRecord], matrix: Matrix = MATRIX) -> Context:
    """The evaluator's own grouping, as `evaluate` builds it for the sim stage."""
    from fractions import Fraction

    return Context(
        baseline=matrix.acceptance.baseline,
        target=matrix.repetitions.for_stage("sim"),
        tolerance=Fraction(repr(matrix.acceptance.token_tolerance)),
        cells=tuple((r.name, i.name, i.size_class) for r, i in matrix.cells()),
        quality_recipes=tuple(matrix.acceptance.quality_recipes),
        data=group(records, matrix, "sim").data,
        seeded=True,
        rules=dict(matrix.acceptance.rules),
    )


def random_run(rng: random.Random, config: str) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if rng.random() < 0.15:
        spec["outcome"] = rng.choice(["failed", "harness_error", "aborted", "timed_out"])
    if rng.random() < 0.1:
        spec["hit_iteration_limit"] = rng.choice([True, None])
    spec["input_tokens"] = rng.choice([None, *(rng.randint(800, 1300) for _ in range(6))])
    if rng.random() < 0.15:
        spec["quality_ok"] = rng.choice([False, None])
    if rng.random() < 0.03:
        spec["disk_clean"] = rng.choice([False, None])
    if rng.random() < 0.01:
        spec["consistency_ok"] = False
    return spec


@pytest.mark.parametrize("seed", range(40))
def test_the_vectorized_rule_gives_the_evaluator_statuses(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 6)
    cells = {
        (cfg, recipe, inp): [random_run(rng, cfg) for _ in range(n)]
        for cfg in CONFIGS
        for recipe, inp, _ in CELLS
    }
    records = make_dataset(rec, cells, n=n)
    verdict = evaluate(records, MATRIX, stability_resamples=10)
    ours = observed_statuses(context_of(records), verdict.configs)
    for name, cv in verdict.configs.items():
        assert ours[name] == cv.verdict, name
        for key, result in cv.criteria.items():
            for ev in result.cells:
                assert ours[(name, key, ev.recipe, ev.input)] == ev.status, (name, key, ev)


def test_a_clear_decision_is_the_same_in_every_resample() -> None:
    v = evaluate(make_dataset(rec, n=5), MATRIX)
    assert v.decision == "131072"
    assert v.stability is not None
    assert v.stability.decision == 1.0
    assert v.stability.distribution == {"131072": 1.0}
    assert v.stability.resamples == 1000
    assert v.stability.flipping_cells == ()


def test_a_marginal_cell_makes_it_unstable_and_is_named() -> None:
    """128KiB succeeds 4 of 5 against off's 4 of 5 in one cell: it passes literally, but a
    rerun often draws fewer successes for 128KiB than for off there."""
    one_failed = [{}] * 4 + [{"outcome": "failed"}]
    cells = {
        ("128KiB", "summarize", "document"): one_failed,
        ("off", "summarize", "document"): one_failed,
    }
    v = evaluate(make_dataset(rec, cells, n=5), MATRIX)
    assert v.decision == "131072"
    assert v.stability is not None
    assert 0.3 < v.stability.decision < 0.9
    assert set(v.stability.distribution) <= {"131072", "32768", "false"}
    assert sum(v.stability.distribution.values()) == pytest.approx(1.0)
    first = v.stability.flipping_cells[0]
    assert (first.config, first.criterion, first.recipe, first.input) == (
        "128KiB",
        "success_rate",
        "summarize",
        "document",
    )
    assert first.label == "128KiB success_rate summarize/document"
    # Seeded: the same figures every time; another seed, close but its own.
    again = evaluate(make_dataset(rec, cells, n=5), MATRIX)
    assert again.stability == v.stability


def test_unmeasured_cells_and_leaks_are_held_where_they_were() -> None:
    cells = {("128KiB", "code-review", "small"): [{}] * 4 + [{"disk_clean": False}]}
    v = evaluate(make_dataset(rec, cells, n=5), MATRIX)
    assert v.configs["128KiB"].verdict == "fail"
    assert v.stability is not None
    # The leak is a fact in every resample: 128KiB never passes.
    assert "131072" not in v.stability.distribution


def test_an_incomplete_stage_is_not_resampled() -> None:
    records = make_dataset(rec, n=5)[:-1]
    v = evaluate(records, MATRIX)
    assert v.decision == "inconclusive"
    assert v.stability is not None
    assert v.stability.resamples == 0
    assert v.stability.distribution == {"inconclusive": 1.0}


def test_resamples_must_be_positive() -> None:
    records = make_dataset(rec, n=2)
    v = evaluate(records, MATRIX)
    with pytest.raises(ValueError, match="resamples must be >= 1"):
        stability(context_of(records), MATRIX, v.configs, v.decision, resamples=0)
