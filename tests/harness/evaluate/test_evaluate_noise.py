"""How far a cell's difference could be noise (`evaluate.noise`): `p_value` and, for rates,
`interval` in every judged criterion cell of the verdict, pinned on hand-made records
and on exact figures a reviewer can redo by hand. They never change a status."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from record_builders import make_dataset, plain_record
from spillover_harness.evaluate import evaluate
from spillover_harness.evaluate.noise import (
    count_higher_p,
    drop_bound,
    exact_interval,
    median_higher_p,
    rate_lower_p,
    weak_pass,
    within_noise,
)
from spillover_harness.evaluate.stability import describe
from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.verdict import CellEvidence, Verdict

MATRIX = load_matrix(None)
CELL = ("code-review", "small")


rec = plain_record


def verdict_with(config_specs: list[dict[str, Any]], base_specs: list[dict[str, Any]]) -> Verdict:
    """Five good runs everywhere, except code-review/small of 128KiB and off."""
    cells = {("128KiB", *CELL): config_specs, ("off", *CELL): base_specs}
    return evaluate(make_dataset(rec, cells, n=5), MATRIX)


def cell(v: Verdict, key: str) -> CellEvidence:
    return next(c for c in v.configs["128KiB"].criteria[key].cells if (c.recipe, c.input) == CELL)


FAILED = {"outcome": "failed"}


def test_four_of_five_against_five_of_five_fails_literally_and_is_within_noise() -> None:
    v = verdict_with([{}] * 4 + [FAILED], [{}] * 5)
    ev = cell(v, "success_rate")
    assert ev.status == "fail"
    # Fisher, one-sided: P(X <= 4) with 9 successes of 10 drawn 5 and 5 = 126/252.
    assert ev.p_value == pytest.approx(0.5)
    assert within_noise(ev.p_value)
    assert ev.interval == pytest.approx((0.28358206388191054, 0.9949492366205319))


def test_none_of_five_against_five_of_five_is_not_noise() -> None:
    v = verdict_with([FAILED] * 5, [{}] * 5)
    ev = cell(v, "success_rate")
    assert ev.status == "fail"
    assert ev.p_value == pytest.approx(1 / 252)
    assert not within_noise(ev.p_value)
    assert ev.interval == pytest.approx((0.0, 0.5218237501049814))


def test_the_stability_of_the_decision_follows_the_cells_noise() -> None:
    """The same hand-made cells, resampled: 4/5 against 5/5 fails 128KiB literally, but a
    rerun draws 5/5 again with probability 0.8^5 = 0.33, so the decision it gives (32768)
    is unstable and that cell is named; 0/5 against 5/5 gives 32768 in every resample."""
    noisy = verdict_with([{}] * 4 + [FAILED], [{}] * 5)
    assert noisy.decision == "32768"
    steady = noisy.stability
    assert steady is not None and steady.resamples == 1000
    assert steady.distribution["131072"] == pytest.approx(0.8**5, abs=0.05)
    assert steady.decision == pytest.approx(1 - 0.8**5, abs=0.05) and steady.decision < 0.9
    assert set(steady.distribution) == {"32768", "131072"}
    first = steady.flipping_cells[0]
    assert first.label == "128KiB success_rate code-review/small" and first.share == 1.0
    assert describe(noisy.decision, steady).startswith(
        "32768 in 70% of 1000 resamples of this stage's own runs (otherwise: 131072 30%)"
    )

    clear = verdict_with([FAILED] * 5, [{}] * 5)
    assert clear.decision == "32768"
    assert clear.stability is not None
    assert clear.stability.decision == 1.0
    assert clear.stability.distribution == {"32768": 1.0}
    assert clear.stability.flipping_cells == ()
    assert describe(clear.decision, clear.stability) == (
        "32768 in 100% of 1000 resamples of this stage's own runs (a diagnostic of this "
        "verdict's fragility, not a probability)"
    )


def test_a_pass_whose_interval_admits_a_large_drop_is_weak() -> None:
    v = verdict_with([{}] * 5, [{}] * 5)
    ev = cell(v, "success_rate")
    assert ev.status == "pass"
    assert ev.p_value == pytest.approx(1.0)
    # 5/5 alone cannot rule out a true rate of 0.48 (the exact 95% interval).
    assert ev.interval == pytest.approx((0.4781762498950186, 1.0))
    # Weak is judged on the difference, both sides' uncertainty: 5/5 against 5/5 cannot
    # rule out a drop of 10% (Newcombe's bound is about -0.35); 400/400 against 400/400 can.
    assert weak_pass(5, 5, 5, 5)
    assert drop_bound(5, 5, 5, 5) == pytest.approx(0.351, abs=0.01)
    assert not weak_pass(400, 400, 400, 400)
    # A configuration better than off by a lot is no weak pass, whatever off's estimate
    assert not weak_pass(100, 100, 50, 100)


def test_a_token_fail_is_within_noise_against_the_tolerance_not_identity() -> None:
    """A configuration exactly at the limit (median 1.10 x off's) fails criterion 3 about
    half the time; a 5% test calls about 5% of stages a fail beyond noise, not 5-31%."""
    rng = np.random.default_rng(7)
    beyond = fails = 0
    for _ in range(150):
        base = 1000 * np.exp(0.1 * rng.standard_normal(5))
        config = 1100 * np.exp(0.1 * rng.standard_normal(5))
        v = verdict_with(
            [{"input_tokens": int(t)} for t in config], [{"input_tokens": int(t)} for t in base]
        )
        ev = cell(v, "input_tokens")
        fails += ev.status == "fail"
        beyond += ev.status == "fail" and not within_noise(ev.p_value)
    assert 40 <= fails <= 110
    assert beyond / 150 <= 0.08


def test_iteration_limit_counts_more_hits_as_adverse() -> None:
    hit = {"hit_iteration_limit": True}
    v = verdict_with([hit] * 3 + [{}] * 2, [{}] * 5)
    ev = cell(v, "iteration_limit")
    assert ev.status == "fail"
    assert ev.p_value == pytest.approx(count_higher_p(3, 5, 0, 5))
    assert ev.p_value == pytest.approx(0.08333333333333333)  # 21/252
    assert ev.interval == pytest.approx(exact_interval(3, 5))


def test_tokens_get_a_permutation_p_value_and_no_interval() -> None:
    high = [{"input_tokens": t} for t in (1500, 1600, 1700, 1800, 1900)]
    low = [{"input_tokens": t} for t in (1000, 1010, 1020, 1030, 1040)]
    v = verdict_with(high, low)
    ev = cell(v, "input_tokens")
    assert ev.status == "fail"
    # Every one of the 252 relabellings is tried; 6 give a median difference of 680 or
    # more: those giving the configuration 1700, 1800, 1900 and any two of 1500, 1600,
    # 1030, 1040 (C(4, 2) = 6).
    assert ev.p_value == pytest.approx(6 / 252)
    assert ev.interval is None
    # The question is the criterion's: could a configuration exactly at the tolerance
    # (1.10 x) show this? Its values are divided by 1.10 before the relabellings.
    same = verdict_with(low, low)
    assert cell(same, "input_tokens").p_value == pytest.approx(
        median_higher_p([v / 1.1 for v in (1000, 1010, 1020, 1030, 1040)],
                        [1000, 1010, 1020, 1030, 1040])
    )  # fmt: skip
    assert within_noise(cell(same, "input_tokens").p_value)


def test_no_leak_and_inconclusive_cells_carry_no_noise_figure() -> None:
    v = verdict_with([{"input_tokens": None}] * 5, [{}] * 5)
    ev = cell(v, "input_tokens")
    assert ev.status == "inconclusive"
    assert (ev.p_value, ev.interval) == (None, None)
    leak = cell(v, "no_leak")
    assert (leak.p_value, leak.interval) == (None, None)


def test_the_figures_are_in_verdict_json() -> None:
    v = verdict_with([{}] * 4 + [FAILED], [{}] * 5)
    written = v.to_json()["configs"]["128KiB"]["criteria"]["success_rate"]["cells"]
    first = next(c for c in written if (c["recipe"], c["input"]) == CELL)
    assert first["p_value"] == pytest.approx(0.5)
    assert first["interval"] == pytest.approx([0.28358206388191054, 0.9949492366205319])


def test_exact_helpers_match_hand_figures() -> None:
    assert rate_lower_p(4, 5, 5, 5) == pytest.approx(0.5)
    assert rate_lower_p(5, 5, 4, 5) == pytest.approx(1.0)
    assert exact_interval(0, 5)[0] == 0.0
    assert exact_interval(5, 5)[1] == 1.0
    # Monte Carlo beyond 2000 relabellings: seeded, so the same figure every time.
    big = list(range(40))
    assert median_higher_p(big, big, seed=3) == median_higher_p(big, big, seed=3)


@pytest.mark.parametrize(
    ("total", "n", "spread"), [(400, 40, 4.0), (400, 40, 0.01), (3000, 1500, 4.0)]
)
def test_the_windowed_relabellings_have_the_whole_pools_distribution(
    total: int, n: int, spread: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large cells draw relabellings around the middle of the pooled order; rows whose
    median falls outside are completed over the whole pool (spread 0.01: nearly all).
    Either way the median differences are distributed as with whole-pool subsets."""
    import numpy as np
    from spillover_harness.evaluate import noise

    monkeypatch.setattr(noise, "WINDOW_SPREAD", spread)
    ordered = np.sort(np.random.default_rng(5).normal(100, 10, total))
    draws = 20_000
    windowed = noise._random_differences(ordered, n, draws, np.random.default_rng(2))
    keys = np.random.default_rng(3).random((draws, total))
    mask = np.zeros((draws, total), dtype=bool)
    np.put_along_axis(mask, np.argpartition(keys, n - 1, axis=1)[:, :n], True, axis=1)
    whole = noise._differences(ordered, mask)
    assert windowed.std() == pytest.approx(whole.std(), rel=0.03)
    for q in (0.05, 0.5, 0.95):
        assert np.quantile(windowed, q) == pytest.approx(
            np.quantile(whole, q), abs=0.1 * whole.std()
        )
