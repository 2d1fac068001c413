"""`make bench` prints one `name=value` per line, each figure beside its direct path
(the format scripts and the README rely on; no timing is asserted)."""

from __future__ import annotations

import re

import pytest
from spillover_harness.bench.bench import main


def test_every_line_is_name_equals_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--records", "300", "--seeds", "1", "--error-seeds", "1", "--cap", "9"]) == 0
    lines = capsys.readouterr().out.splitlines()
    figures = dict(line.split("=", 1) for line in lines)
    assert all(re.fullmatch(r"[a-z_]+( [a-z_0-9]+)?=\S+", line) for line in lines), lines
    assert figures["sim_matrix_runs"] == "60"
    assert figures["evaluate_records"] == "300"
    for name in ("ratio sim_matrix", "ratio evaluate"):
        assert float(figures[name]) > 0
    # the shipped simulator's decision is reproducible: --until-stable 0.9 adds no run
    assert figures["sim_adaptive_runs"] == "60"
    assert {"error_rate_identical_fixed", "error_rate_identical_until_stable"} <= set(figures)
