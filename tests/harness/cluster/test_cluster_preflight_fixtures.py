"""Which inputs preflight looks for on the platform (`cluster/preflight.py`): the
matrix's cells only, the input built on first use too when the matrix names it."""

from __future__ import annotations

from pathlib import Path

from spillover_harness.cluster.preflight import matrix_fixtures
from spillover_harness.fixtures import build_fixtures
from spillover_harness.plan.matrix import load_matrix

MATRICES = Path(__file__).resolve().parents[3] / "harness/spillover_harness/plan/matrices"


def test_the_memory_matrix_needs_the_16_mib_input_and_the_default_does_not() -> None:
    memory = load_matrix(MATRICES / "memory-budget.yaml")
    wanted, lazy = matrix_fixtures(build_fixtures(memory.seed), memory)
    assert lazy
    assert {(f.recipe, f.input_name) for f in wanted} == {
        ("code-review", "large"),
        ("code-review", "budget"),
        ("code-review", "budget-16MiB"),
    }
    default = load_matrix(None)
    wanted, lazy = matrix_fixtures(build_fixtures(default.seed), default)
    assert not lazy
    assert ("code-review", "budget-16MiB") not in {(f.recipe, f.input_name) for f in wanted}
    assert ("code-review", "budget") not in {(f.recipe, f.input_name) for f in wanted}
