"""The report's memory section: per configuration, peak against limit, restarts, OOM
kills and results kept inline because the budget was full; warnings."""

from __future__ import annotations

from typing import Any

from record_builders import MATRIX, make_record
from spillover_harness.report.memory import memory_section, memory_warnings, summarize_memory
from spillover_harness.results.records import McpHostMemory, RunRecord
from spillover_harness.results.results_dir import LanePoint, MemoryLane

MIB = 1024 * 1024


def good(_config: str) -> dict[str, Any]:
    return {"input_tokens": 1000}


def rec(config: str, **fields: Any) -> RunRecord:
    return make_record(good, config, "code-review", "large", stage="minikube", **fields)


def mem(peak: int, *, restarts: int = 0, oom: int = 0, block: int | None = 1) -> McpHostMemory:
    return McpHostMemory(
        peak_bytes=peak * MIB, limit_bytes=2048 * MIB, restarts=restarts, oom_kills=oom, block=block
    )


def test_records_without_the_fields_give_no_section() -> None:
    assert memory_section([rec("off"), rec("128KiB")], MATRIX, "minikube", None) == []


def test_a_blocks_figures_count_once_and_blocks_add_up() -> None:
    records = [
        rec("128KiB", mcp_host_memory=mem(900, restarts=1, oom=1, block=2)),
        rec("128KiB", mcp_host_memory=mem(900, restarts=1, oom=1, block=2)),
        rec("128KiB", mcp_host_memory=mem(1200, restarts=1, oom=0, block=5)),
        rec("off", mcp_host_memory=mem(300, block=1), budget_inline=0),
    ]
    by = {c.config: c for c in summarize_memory(records, "minikube")}
    assert by["128KiB"].peak_bytes == 1200 * MIB
    assert (by["128KiB"].restarts, by["128KiB"].oom_kills) == (2, 1)
    assert by["128KiB"].budget_inline is None and by["off"].budget_inline == 0
    assert summarize_memory(records, "dev") == []  # another stage's records


def test_warnings_at_the_fraction_and_for_restarts_and_oom_kills() -> None:
    records = [
        rec("off", mcp_host_memory=mem(1600)),  # 78%: below 80%
        rec("128KiB", mcp_host_memory=mem(1640)),  # 80.1%
        rec("32KiB", mcp_host_memory=mem(200, restarts=1, oom=1)),
    ]
    warnings = memory_warnings(summarize_memory(records, "minikube"), None, 0.8)
    assert [w.split(":")[0] for w in warnings] == ["`128KiB`", "`32KiB`", "`32KiB`"]
    assert "80% of its limit 2,048.0 MiB" in warnings[0]
    assert "OOM-killed 1 time(s)" in warnings[1] and "restarted 1 time(s)" in warnings[2]
    assert memory_warnings(summarize_memory(records, "minikube"), None, 0.78)[0].startswith("`off`")


def test_the_section_shows_budget_fallbacks_tokens_and_the_lane() -> None:
    records = [
        rec("off", mcp_host_memory=mem(300), budget_inline=0),
        rec("128KiB", mcp_host_memory=mem(400), budget_inline=3, input_tokens=2000),
        rec("128KiB", mcp_host_memory=mem(400), budget_inline=0, input_tokens=4000),
    ]
    lane = MemoryLane(
        "code-review",
        "large",
        (
            LanePoint("128KiB", 1, 500 * MIB, 1024 * MIB),
            LanePoint("128KiB", 8, 2000 * MIB, 1024 * MIB),
        ),
    )
    text = "\n".join(memory_section(records, MATRIX, "minikube", lane))
    assert "| 128KiB | 400.0 MiB | 2,048.0 MiB | 20% | 0 | 0 | 3 in 1 run(s) | 3,000 |" in text
    assert "| 128KiB | 8 | 2,000.0 MiB (OOM-killed) | 1,024.0 MiB | 195% |" in text
    assert "`128KiB` with 8 execution(s) at once: the working set would reach" in text
