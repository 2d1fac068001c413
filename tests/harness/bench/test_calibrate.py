"""`make calibrate` (`bench.calibrate`): the reliability table, the expected calibration
error and the Brier score, checked on figures a reviewer can redo by hand; and the bench
tells a miscalibrated figure (the bootstrap's stability, the planted fault) from the
reproduction probability."""

from __future__ import annotations

import re

import pytest
from spillover_harness.bench.calibrate import brier, calibrate_synthetic, main, reliability
from spillover_harness.bench.scenarios import by_name


def test_reliability_weights_each_bucket_by_its_stages() -> None:
    # two stages state 0.15 where the truth is 0.35; two state 0.95 where it is 0.95
    error, table = reliability([0.15, 0.15, 0.95, 0.95], [0.35, 0.35, 0.95, 0.95])
    assert error == pytest.approx(0.5 * 0.2)
    assert [(b.low, b.stages) for b in table] == [(0.1, 2), (0.9, 2)]
    # a statement of 1.0 falls in the last bucket, not past it
    _, table = reliability([1.0], [1.0])
    assert table[0].low == 0.9


def test_brier_is_taken_in_expectation_over_the_fresh_stage() -> None:
    # stating 0.5 where the truth is 0.5: (0.5 - Y)^2 is 0.25 whatever Y is
    assert brier([0.5], [0.5]) == pytest.approx(0.25)
    # stating 1 where the truth is 1: never wrong
    assert brier([1.0], [1.0]) == pytest.approx(0.0)
    # stating 1 where the truth is 0.3: wrong 70% of the time
    assert brier([1.0], [0.3]) == pytest.approx(0.7)


def test_the_bench_tells_a_miscalibrated_figure() -> None:
    """The bootstrap's stability, the planted fault: it draws 5/5 as 5/5, so it states far
    more than fresh stages agree. The bench must say so; the reproduction probability,
    judged the same way on the same stages, must not be said to be worse."""
    result = calibrate_synthetic(by_name("identical-0.9"), stages=40, repetitions=5)
    assert result.stability_calibration_error > 0.2
    assert result.calibration_error < result.stability_calibration_error - 0.1
    assert result.brier < result.stability_brier
    assert sum(b.stages for b in result.table) == 40


def test_every_figure_line_is_name_equals_value(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--stages", "6", "--sim-stages", "2", "--scenario", "identical-0.9",
            "--scenario", "simulator-paired"]  # fmt: skip
    assert main(argv) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    assert all(re.fullmatch(r"[a-z0-9_.-]+=\d+\.\d+", ln) for ln in lines), lines
    names = {ln.split("=")[0] for ln in lines}
    assert {"identical-0.9.calibration_error", "simulator-paired.brier",
            "calibration_error_worst"} <= names  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--stages", "1"], "--stages must be between 2 and 10000"),
        (["--scenario", "nope"], "unknown scenario"),
        (["--repetitions", "0"], "--repetitions must be between 1 and 10000"),
    ],
)
def test_bad_arguments_are_named(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err
