"""The report's handoff-cache section: per handoff configuration and cell, how many
results the bounded cache evicted and how many queries hit an evicted result (ref
misses). Shown only when the matrix has a `strategy: handoff` configuration; read
from the records (the criteria judge handoff configurations like any other)."""

from __future__ import annotations

from collections.abc import Sequence

from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import RunRecord

__all__ = ["cache_section"]


def cache_section(records: Sequence[RunRecord], matrix: Matrix) -> list[str]:
    handoff = [c for c in matrix.configurations if c.strategy == "handoff"]
    if not handoff:
        return []
    lines = [
        "## Handoff cache",
        "",
        "Configurations with `strategy: handoff` (the sibling design, simulated: "
        "docs/simulator.md §8) are judged on the same criteria as spillover above. "
        "What only the cache has: evictions (results pushed out of the bounded FIFO "
        "cache) and ref misses (queries of an evicted result; the agent calls the tool "
        "again).",
        "",
        "| configuration | settings | cell | runs | evictions | ref misses "
        "| runs with a ref miss |",
        "|---|---|---|---|---|---|---|",
    ]
    for config in handoff:
        spec = config.handoff
        settings = (
            f"threshold {spec.threshold_tokens} tokens, {spec.max_entries} entries, "
            f"preview {spec.preview_chars} chars"
            if spec is not None
            else "—"
        )
        for recipe, spec_input in matrix.cells():
            runs = [
                r
                for r in records
                if r.config == config.name
                and r.recipe == recipe.name
                and r.input == spec_input.name
                and r.outcome != "harness_error"
            ]
            evictions = sum(r.cache_evictions or 0 for r in runs)
            misses = sum(r.cache_ref_misses or 0 for r in runs)
            missed = sum(1 for r in runs if r.cache_ref_misses)
            lines.append(
                f"| `{config.name}` | {settings} | {recipe.name}/{spec_input.name} | "
                f"{len(runs)} | {evictions} | {misses} | {missed} |"
            )
    lines.append("")
    return lines
