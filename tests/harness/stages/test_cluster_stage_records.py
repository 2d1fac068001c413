"""After a cluster stage: the block checks' problems and each block's mcp-host memory
written into the records in one rewrite (`stages.cluster_stage.mark_inconsistent`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from record_builders import make_record
from spillover_harness.results.records import McpHostMemory, RunRecord, read_records
from spillover_harness.stages.cluster_stage import mark_inconsistent


def good(_config: str) -> dict[str, Any]:
    return {"input_tokens": 1000, "spillover_persisted": 0}


def write(path: Path, records: list[RunRecord]) -> None:
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))


def test_memory_goes_to_the_runs_of_its_block_and_problems_stay(tmp_path: Path) -> None:
    a, b, c = (make_record(good, "off", "code-review", "large", stage="minikube") for _ in "abc")
    path = tmp_path / "runs.jsonl"
    write(path, [a, b, c])
    figures = McpHostMemory(peak_bytes=100, limit_bytes=200, restarts=0, oom_kills=0, block=1)
    updated = mark_inconsistent(
        path, {b.run_id: ["moved"]}, memory={a.run_id: figures, b.run_id: figures}
    )
    assert updated == read_records(path)
    by = {r.run_id: r for r in updated}
    assert by[a.run_id].mcp_host_memory == figures and by[a.run_id].consistency_ok is None
    assert by[b.run_id].mcp_host_memory == figures and by[b.run_id].consistency_ok is False
    assert by[c.run_id] == c


def test_a_resumed_stage_numbers_its_blocks_after_the_recorded_ones(tmp_path: Path) -> None:
    before = make_record(
        good,
        "off",
        "code-review",
        "large",
        stage="minikube",
        mcp_host_memory=McpHostMemory(peak_bytes=1, block=3),
    )
    new = make_record(good, "128KiB", "code-review", "large", stage="minikube")
    path = tmp_path / "runs.jsonl"
    write(path, [before, new])
    updated = mark_inconsistent(path, {}, memory={new.run_id: McpHostMemory(block=1)})
    memory = updated[1].mcp_host_memory
    assert memory is not None and memory.block == 4
    assert updated[0].mcp_host_memory == before.mcp_host_memory
