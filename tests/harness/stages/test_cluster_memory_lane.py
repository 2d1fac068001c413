"""The concurrency lane on a cluster stage (`stages/memory_lane.py`): which runs it
starts. That it measures the real kubelet's figures is tested end to end on the real
node (tests/integration/test_validate_local.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from spillover_harness.plan.matrix import MatrixError, load_matrix
from spillover_harness.results.records import RunKey, run_id_for
from spillover_harness.run.runner import seed_for
from spillover_harness.stages.memory_lane import lane_jobs

MEMORY_MATRIX = (
    Path(__file__).resolve().parents[3]
    / "harness/spillover_harness/plan/matrices/memory-budget.yaml"
)


def test_a_point_is_n_runs_of_the_lane_cell_seeded_as_the_stage_seeds_them(
    tmp_path: Path,
) -> None:
    matrix = load_matrix(MEMORY_MATRIX)
    config = matrix.configurations[1]
    jobs = lane_jobs(matrix, "minikube", config, 4, tmp_path)
    recipe, input_name = matrix.memory_lane_cell()
    assert [j.run_id for j in jobs] == [f"lane-{config.name}-n4-{i}" for i in range(1, 5)]
    assert {(j.recipe, j.input.name, j.config.name, j.stage) for j in jobs} == {
        (recipe, input_name, config.name, "minikube")
    }
    assert [j.seed for j in jobs] == [seed_for(matrix, recipe, input_name, i) for i in range(1, 5)]
    assert all(j.timeout_s == matrix.run_timeout_s for j in jobs)


def test_lane_run_ids_never_collide_with_the_matrix_runs(tmp_path: Path) -> None:
    """The lane's runs are not records of the stage: their ids are apart from every
    run id the runner gives the matrix's cells."""
    matrix = load_matrix(MEMORY_MATRIX)
    lane_ids = {
        job.run_id
        for config in matrix.configurations
        for n in matrix.memory.concurrency or ()
        for job in lane_jobs(matrix, "minikube", config, n, tmp_path)
    }
    assert lane_ids and len(lane_ids) == sum(
        n * len(matrix.configurations) for n in matrix.memory.concurrency or ()
    )
    stage_ids = {
        run_id_for(RunKey("minikube", config.name, recipe.name, spec.name, rep))
        for config in matrix.configurations
        for recipe, spec in matrix.cells()
        for rep in range(1, matrix.repetitions.minikube + 1)
    }
    assert not lane_ids & stage_ids


def test_the_default_matrix_runs_the_lane_on_cluster_stages_only() -> None:
    """The default matrix measures headroom where the mcp-host is real (N = 1, 2, 4 on
    minikube and dev); the simulator's lane is `make memory`'s."""
    matrix = load_matrix(None)
    assert matrix.memory.concurrency == [1, 2, 4]
    assert [s for s in ("sim", "minikube", "dev") if matrix.runs_lane(s)] == ["minikube", "dev"]


def test_a_matrix_opts_out_of_the_lane_with_lane_stages(tmp_path: Path) -> None:
    text = MEMORY_MATRIX.read_text(encoding="utf-8")
    assert load_matrix(MEMORY_MATRIX).runs_lane("dev")  # every stage by default
    out = tmp_path / "m.yaml"
    out.write_text(
        text.replace("  concurrency: [1, 2, 4]\n", "  concurrency: [1, 2, 4]\n  lane_stages: []\n"),
        encoding="utf-8",
    )
    opted_out = load_matrix(out)
    assert opted_out.memory.concurrency == [1, 2, 4]
    assert not any(opted_out.runs_lane(s) for s in ("sim", "minikube", "dev"))
    out.write_text(
        text.replace(
            "  concurrency: [1, 2, 4]\n", "  concurrency: [1, 2, 4]\n  lane_stages: [prod]\n"
        ),
        encoding="utf-8",
    )
    with pytest.raises(MatrixError, match=r"memory\.lane_stages"):
        load_matrix(out)
