"""The advisory token statistics (issue 12 item 7): paired where runs share seed and
input, which method was used, and no runs-needed hint when every pair is equal."""

from __future__ import annotations

from typing import Any

import pytest
from record_builders import MATRIX, CellKey, Spec, make_dataset, make_record
from spillover_harness.evaluate import evaluate
from spillover_harness.report.report import render_markdown
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import TokenRatio, Verdict

# The seed decides most of a run's size: six repetitions far apart (six: the fewest that
# a 95% interval of a median can be had from).
SEEDED = (600, 900, 1200, 1500, 2000, 2400)


def _good_run(config: str) -> Spec:
    return {
        "hit_iteration_limit": False,
        "iterations": 5,
        "input_tokens": 1000,
        "output_tokens": 100,
        "duration_s": 10.0,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
    }


def rec(config: str, recipe: str, inp: str, *, stage: str = "sim", **fields: Any) -> RunRecord:
    return make_record(_good_run, config, recipe, inp, stage=stage, **fields)


def run(cells: dict[CellKey, list[Spec]]) -> Verdict:
    """Repetitions 7-12 stand for runs that do not pair: the plan's 1-6 are then missing."""
    return evaluate(make_dataset(rec, cells, n=6), MATRIX, allow_incomplete=True, resamples=2000)


def ratio(v: Verdict, config: str, inp: str) -> TokenRatio:
    return next(t for t in v.advisory.token_ratios if t.config == config and t.input == inp)


def tokens(values: tuple[int, ...], *, reps: tuple[int, ...] = (1, 2, 3, 4, 5, 6)) -> list[Spec]:
    return [{"input_tokens": t, "repetition": r} for t, r in zip(values, reps, strict=True)]


@pytest.mark.parametrize(("inp", "reading"), [("small", "clear pass"), ("large", "clear fail")])
def test_identical_pairs_get_no_runs_needed_hint(inp: str, reading: str) -> None:
    v = run(
        {
            ("off", "code-review", inp): tokens(SEEDED),
            ("128KiB", "code-review", inp): tokens(SEEDED),
        }
    )
    t = ratio(v, "128KiB", inp)
    assert (t.method, t.pairs, t.identical) == ("paired", 6, True)
    assert t.ratio == 1.0 and t.paired_ratio == 1.0 and t.ci == (1.0, 1.0)
    assert t.reading == reading
    assert t.runs_to_resolve is None and t.hint == ""
    assert not any(f"128KiB code-review/{inp}" in h for h in v.advisory.hints)
    # the verdict itself is the criterion's: equal medians pass small, fail large
    status = v.configs["128KiB"].criteria["input_tokens"].cells
    assert next(c for c in status if c.input == inp).status == reading.split()[1]


def test_a_handful_of_identical_pairs_is_too_few_to_tell() -> None:
    """Five equal seeded pairs are exact for those seeds, but the next repetitions are
    new seeds: below six pairs no 'clear pass' is read into them either."""
    reps = (1, 2, 3, 4, 5)
    v = run(
        {
            ("off", "code-review", "small"): tokens(SEEDED[:5], reps=reps),
            ("128KiB", "code-review", "small"): tokens(SEEDED[:5], reps=reps),
        }
    )
    t = ratio(v, "128KiB", "small")
    assert (t.method, t.identical) == ("paired", True)
    assert t.reading == "too few runs to tell" and t.runs_to_resolve == 6
    assert "every pair equal for these seeds" in t.hint and t.hint in v.advisory.hints


def test_the_same_identical_values_unpaired_were_the_misleading_close_call() -> None:
    """What issue 12 saw: resampled independently, equal cells 'need' many more runs."""
    v = run(
        {
            ("off", "code-review", "small"): tokens(SEEDED),
            ("128KiB", "code-review", "small"): tokens(SEEDED, reps=(7, 8, 9, 10, 11, 12)),
        }
    )
    t = ratio(v, "128KiB", "small")
    assert (t.method, t.pairs, t.paired_ratio) == ("independent", 0, None)
    assert t.reading == "close call"
    assert t.runs_to_resolve is not None and t.runs_to_resolve > 100
    assert "run(s) per side" in t.hint


def test_pairing_removes_the_seed_spread_from_a_consistent_saving() -> None:
    saving = tuple(int(x * 0.95) for x in SEEDED)  # every pair 5% below the baseline
    cells = {
        ("off", "code-review", "large"): tokens(SEEDED),
        ("128KiB", "code-review", "large"): tokens(saving),
        ("32KiB", "code-review", "large"): tokens(saving, reps=(7, 8, 9, 10, 11, 12)),
    }
    v = run(cells)
    paired, independent = ratio(v, "128KiB", "large"), ratio(v, "32KiB", "large")
    assert paired.method == "paired" and not paired.identical
    assert paired.reading == "clear pass" and paired.ci is not None and paired.ci[1] < 1.0
    assert independent.method == "independent" and independent.reading == "close call"


def test_a_paired_close_call_says_so_in_its_hint() -> None:
    base = SEEDED
    mixed = (
        int(base[0] * 0.9), int(base[1] * 1.2), int(base[2] * 1.05), base[3], base[4] * 2,
        int(base[5] * 0.95),
    )  # fmt: skip
    v = run(
        {
            ("off", "code-review", "small"): tokens(base),
            ("128KiB", "code-review", "small"): tokens(mixed),
        }
    )
    t = ratio(v, "128KiB", "small")
    assert t.method == "paired" and t.reading == "close call"
    assert "paired" in t.hint and "pair(s) of runs with the same seed" in t.hint
    assert t.hint in v.advisory.hints


def test_few_pairs_fall_back_to_the_independent_bootstrap() -> None:
    v = run(
        {
            ("off", "code-review", "medium"): tokens(SEEDED),
            ("128KiB", "code-review", "medium"): tokens(SEEDED, reps=(1, 8, 9, 10, 11, 12)),
        }
    )
    t = ratio(v, "128KiB", "medium")
    assert t.method == "independent" and t.pairs == 0


def test_the_report_names_the_method() -> None:
    records = make_dataset(
        rec,
        {
            ("off", "code-review", "small"): tokens(SEEDED),
            ("128KiB", "code-review", "small"): tokens(SEEDED),
        },
        n=6,
    )
    v = evaluate(records, MATRIX, allow_incomplete=True, resamples=200)
    text = render_markdown(v, records, MATRIX)
    section = text[text.index("## Advisory statistics") :]
    row = next(
        line for line in section.splitlines() if line.startswith("| 128KiB | code-review/small")
    )
    assert "paired (6 pairs)" in row and "every pair equal" in row
    assert "would likely settle it" not in row
    # exact for the seeds run, no claim about the seeds more repetitions would bring
    assert "exact for these seeds (new repetitions are new seeds)" in row
    assert "would not change it" not in row
    assert "even when every seeded pair is equal (exact for those seeds" in section


# -- pairing only where runs share a seed; wording tied to the numbers -------------------


def test_cluster_stage_runs_never_pair_by_repetition() -> None:
    """A cluster stage's runs are not seeded: the same repetition number means nothing."""
    cells = {
        ("off", "code-review", "small"): tokens(SEEDED),
        ("128KiB", "code-review", "small"): tokens(SEEDED),
    }
    records = make_dataset(rec, cells, n=6, stage="minikube")
    v = evaluate(records, MATRIX, allow_incomplete=True, resamples=500)
    t = ratio(v, "128KiB", "small")
    assert (t.method, t.pairs, t.identical, t.paired_ratio) == ("independent", 0, False, None)
    text = render_markdown(v, records, MATRIX)
    assert "A cluster stage's runs are not seeded" in text
    # the same records on stage sim do pair
    sim = evaluate(make_dataset(rec, cells, n=6), MATRIX, allow_incomplete=True, resamples=500)
    assert ratio(sim, "128KiB", "small").method == "paired"


@pytest.mark.parametrize(
    ("point", "ci", "limit", "strict", "reading"),
    [
        (0.8, (0.7, 0.9), 1.1, False, "clear pass"),
        (1.3, (1.2, 1.4), 1.1, False, "clear fail"),
        (1.05, (0.9, 1.2), 1.1, False, "close call"),  # 4.5% below the limit
        (1.2, (1.0, 1.5), 1.1, False, "close call"),  # 9.1% above
        (3.14, (0.9, 5.0), 1.1, False, "leans fail"),  # 2.85x the limit: never "close"
        (0.5, (0.3, 1.2), 1.1, False, "leans pass"),
        (1.0, (0.9, 1.0), 1.0, True, "close call"),  # large: strictly below the limit
    ],
)
def test_the_reading_follows_the_stated_thresholds(
    point: float, ci: tuple[float, float], limit: float, strict: bool, reading: str
) -> None:
    from spillover_harness.evaluate.advisory import CLOSE_CALL_BAND, reading_for

    assert CLOSE_CALL_BAND == 0.10
    assert reading_for(point, ci, limit, strict=strict) == reading


def test_a_far_ratio_with_a_wide_ci_leans_and_the_report_states_the_thresholds() -> None:
    """Issue 21: a 3.14x ratio was called a close call. Six wildly spread runs per side."""
    cells = {
        ("off", "code-review", "medium"): tokens((1000,) * 6, reps=(7, 8, 9, 10, 11, 12)),
        ("128KiB", "code-review", "medium"): tokens((500, 5780) * 3, reps=(13, 14, 15, 16, 17, 18)),
    }
    records = make_dataset(rec, cells, n=6)
    v = evaluate(records, MATRIX, allow_incomplete=True, resamples=2000)
    t = ratio(v, "128KiB", "medium")
    assert t.ratio is not None and t.ratio > 2.5
    assert t.reading == "leans fail", (t.ratio, t.ci)
    text = render_markdown(v, records, MATRIX)
    assert "`close call` if the ratio is within 10% of the limit" in text


# -- too few runs to tell (issue 26) ------------------------------------------------------


@pytest.mark.parametrize("n", [2, 5])
def test_a_handful_of_runs_is_too_few_to_tell_never_a_clear_pass(n: int) -> None:
    """Two runs against two once read `clear pass`: no 95% interval of a median exists
    below six values, whatever a bootstrap prints."""
    saving = tuple(int(x * 0.5) for x in SEEDED[:n])
    cells = {
        ("off", "code-review", "small"): tokens(SEEDED[:n], reps=tuple(range(1, n + 1))),
        ("128KiB", "code-review", "small"): tokens(saving, reps=tuple(range(1, n + 1))),
    }
    v = evaluate(make_dataset(rec, cells, n=n), MATRIX, allow_incomplete=True, resamples=500)
    t = ratio(v, "128KiB", "small")
    assert t.reading == "too few runs to tell"
    assert t.runs_to_resolve == 6
    assert any("no 95% interval of a median exists below 6 values" in h for h in v.advisory.hints)
    # Six pairs of the same saving: now it can be told.
    six = {
        ("off", "code-review", "small"): tokens(SEEDED),
        ("128KiB", "code-review", "small"): tokens(tuple(int(x * 0.5) for x in SEEDED)),
    }
    assert ratio(run(six), "128KiB", "small").reading == "clear pass"


def test_the_fewest_runs_follow_the_confidence() -> None:
    from spillover_harness.evaluate.advisory import min_runs_for

    assert min_runs_for(0.95) == 6  # 1 - 2 x 0.5^6 = 0.969
    assert min_runs_for(0.5) == 2
    assert min_runs_for(0.99) == 8
