"""The report's memory section: per configuration, the mcp-host's peak working set
against its limit, restarts and OOM kills, results kept inline because the budget was
full, beside the input tokens; memory as a check (the verdict's `memory`, from
`memory_check`: each configuration against the baseline, headroom and leak); the
concurrency lane, or what is wrong with a lane file that cannot be read; and a warning for every
configuration whose peak came within `memory.warn_fraction` of its limit or whose
mcp-host restarted or was OOM-killed (docs/harness.md, "Memory").

Cluster records carry their configuration block's figures (`mcp_host_memory.block`):
restarts and OOM kills are counted once per block. Simulator records carry each
execution's own figures. Records without the fields (older ones) add nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from spillover_harness.plan.matrix import Matrix
from spillover_harness.report.memory_check import claim_text, headroom_text
from spillover_harness.results.records import RunRecord
from spillover_harness.results.results_dir import LANE_FILE, MemoryLane
from spillover_harness.results.verdict import MemoryCheck

__all__ = ["ConfigMemory", "memory_section", "memory_warnings", "summarize_memory"]

MIB = 1024 * 1024


@dataclass
class ConfigMemory:
    """One configuration's memory figures over its runs (None: not measured)."""

    config: str
    peak_bytes: int | None = None
    limit_bytes: int | None = None
    restarts: int | None = None
    oom_kills: int | None = None
    budget_inline: int | None = None
    runs_budget_inline: int = 0
    input_tokens: list[int] = field(default_factory=list)

    def fraction(self) -> float | None:
        if self.peak_bytes is None or not self.limit_bytes:
            return None
        return self.peak_bytes / self.limit_bytes


def _add(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


def summarize_memory(records: Sequence[RunRecord], stage: str | None) -> list[ConfigMemory]:
    """Per configuration (in the records' order), its memory figures."""
    out: dict[str, ConfigMemory] = {}
    blocks_seen: set[tuple[str, int]] = set()
    for r in records:
        if r.stage != stage:
            continue
        cm = out.setdefault(r.config, ConfigMemory(r.config))
        if r.input_tokens is not None and r.outcome != "harness_error":
            cm.input_tokens.append(r.input_tokens)
        if r.budget_inline is not None:
            cm.budget_inline = _add(cm.budget_inline, r.budget_inline)
            cm.runs_budget_inline += r.budget_inline > 0
        mem = r.mcp_host_memory
        if mem is None:
            continue
        if mem.peak_bytes is not None:
            cm.peak_bytes = max(cm.peak_bytes or 0, mem.peak_bytes)
        if mem.limit_bytes is not None:
            cm.limit_bytes = min(cm.limit_bytes or mem.limit_bytes, mem.limit_bytes)
        if mem.block is not None:  # a block's figures, on each of its runs: count once
            if (r.config, mem.block) in blocks_seen:
                continue
            blocks_seen.add((r.config, mem.block))
        cm.restarts = _add(cm.restarts, mem.restarts)
        cm.oom_kills = _add(cm.oom_kills, mem.oom_kills)
    return list(out.values())


def _mib(value: int | None) -> str:
    return "not measured" if value is None else f"{value / MIB:,.1f} MiB"


def _share(peak: int | None, limit: int | None) -> str:
    if peak is None or not limit:
        return "n/a"
    return f"{100 * peak / limit:.0f}%"


def memory_warnings(
    configs: Sequence[ConfigMemory], lane: MemoryLane | None, warn_fraction: float
) -> list[str]:
    """One line per configuration (and lane point) a platform operator must look at."""
    warnings: list[str] = []
    for cm in configs:
        share = cm.fraction()
        if share is not None and share >= warn_fraction:
            warnings.append(
                f"`{cm.config}`: the mcp-host's peak working set {_mib(cm.peak_bytes)} is "
                f"{share:.0%} of its limit {_mib(cm.limit_bytes)} (the report warns from "
                f"{warn_fraction:.0%})"
            )
        if cm.oom_kills:
            warnings.append(f"`{cm.config}`: the mcp-host was OOM-killed {cm.oom_kills} time(s)")
        if cm.restarts:
            warnings.append(f"`{cm.config}`: the mcp-host restarted {cm.restarts} time(s)")
    for p in lane.points if lane is not None else ():
        if p.oom:
            warnings.append(
                f"`{p.config}` with {p.executions} execution(s) at once: the working set "
                f"would reach {_mib(p.peak_bytes)}, past its limit {_mib(p.limit_bytes)}: "
                "the mcp-host would be OOM-killed"
            )
        elif p.peak_bytes >= warn_fraction * p.limit_bytes:
            warnings.append(
                f"`{p.config}` with {p.executions} execution(s) at once: the peak working set "
                f"{_mib(p.peak_bytes)} is {_share(p.peak_bytes, p.limit_bytes)} of its limit "
                f"{_mib(p.limit_bytes)}"
            )
    return warnings


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _check_lines(check: MemoryCheck, sources: Sequence[tuple[str, str]]) -> list[str]:
    """Memory as a check: each configuration against the baseline, headroom and leak."""
    base = check.baseline
    claim = f"x{float(check.claim_limit):.3f}"
    label = (
        "**modelled** (plan/memory_model.py: the baseline, the limit and the store's overhead per "
        "byte are the model's inputs, so the ratio restates the model)"
        if check.source == "modelled"
        else "measured"
    )
    lines = [
        f"**Memory against `{base}`** ({label}; {check.comparison}). The memory claim "
        f"checks {check.claim}: the store's own bytes over the bytes of the results it "
        f"holds, at a run that filled the budget; `above` past {claim}.",
        "",
        _row(
            "configuration",
            "peak working set",
            f"ratio to `{base}`",
            f"memory claim (store, <= {claim})",
            "headroom (executions at once)",
            "leak (end - start)",
            "runs compared / ended early",
        ),
        _row(*(["---"] * 7)),
    ]
    for name, m in check.configs.items():
        ratio = "n/a" if m.ratio_to_baseline is None else f"x{float(m.ratio_to_baseline):.3f}"
        room = headroom_text(m, unit=False)
        leaked = "not measured" if m.leak_bytes is None else f"{m.leak_bytes / MIB:+,.1f} MiB"
        leaked = leaked if m.leak == "not measured" else f"{m.leak} ({leaked})"
        lines.append(
            _row(
                name,
                _mib(m.peak_bytes),
                ratio,
                claim_text(m),
                room,
                leaked,
                f"{m.runs_compared} / {m.runs_left_out}",
            )
        )
    lines += ["", f"- Headroom: {check.headroom_method}."]
    for name, m in check.configs.items():
        how = m.reasons.get("headroom_executions")
        if how:
            lines.append(f"  - `{name}`: {how}.")
    lines.append(f"- Leak: {check.leak_method}.")
    for name, m in check.configs.items():
        for figure in ("peak_bytes", "leak_bytes", "claim"):
            if figure in m.reasons:
                lines.append(f"- `{name}` {figure} not measured: {m.reasons[figure]}.")
    if check.source == "measured":
        lines.append(lower_bound_line(sources))
    lines.append("")
    return lines


def _source_words(source: str) -> str:
    """`prometheus@30s` -> "Prometheus' scrapes every 30 s"; an unknown source as is."""
    kind, _, step = source.partition("@")
    every = f"every {step[:-1]} s" if step.endswith("s") and step[:-1] else step
    named = {"prometheus": "Prometheus' scrapes", "kubelet-summary": "the kubelet Summary API read"}
    return f"{named[kind]} {every} (`{source}`)" if kind in named and every else f"`{source}`"


def lower_bound_line(sources: Sequence[tuple[str, str]]) -> str:
    """The sentence on how far a measured peak can be trusted, naming each source and
    step the peaks came from (`(what, source)`: "the configuration blocks",
    `prometheus@30s`). No source known (records without `peak_source`): Prometheus at
    its scrape interval, the only source such records had."""
    if not sources:
        return (
            "- A peak read from Prometheus is a lower bound: the highest sample at the "
            "scrape interval; a spike between two scrapes is not seen."
        )
    by_source: dict[str, list[str]] = {}
    for what, source in sources:
        whats = by_source.setdefault(source, [])
        if what not in whats:
            whats.append(what)
    parts = [f"{_source_words(src)} for {' and '.join(w)}" for src, w in by_source.items()]
    return (
        "- A measured peak is a lower bound: the highest sample taken, "
        + "; ".join(parts)
        + ". A spike between two samples is not seen."
    )


def peak_sources(
    records: Sequence[RunRecord], stage: str | None, lane: MemoryLane | None
) -> list[tuple[str, str]]:
    """(what, source) of the measured peaks: the configuration blocks' (records) and the
    concurrency lane's points, each source once per what, in order."""
    out: list[tuple[str, str]] = []
    for r in records:
        mem = r.mcp_host_memory
        if r.stage == stage and mem is not None and mem.peak_source:
            pair = ("the configuration blocks", mem.peak_source)
            if pair not in out:
                out.append(pair)
    for p in lane.points if lane is not None else ():
        if p.peak_source:
            pair = ("the concurrency lane", p.peak_source)
            if pair not in out:
                out.append(pair)
    return out


def memory_section(
    records: Sequence[RunRecord],
    matrix: Matrix,
    stage: str | None,
    lane: MemoryLane | None,
    *,
    check: MemoryCheck | None = None,
    lane_problem: str | None = None,
) -> list[str]:
    """The section's lines; none when no record carries memory or budget figures, no
    lane ran and no lane file is broken (records written before these fields existed).
    `check` is the verdict's memory check; `lane_problem` what is wrong with a lane file
    that is there but cannot be read (shown, never silently dropped)."""
    configs = summarize_memory(records, stage)
    measured = any(
        cm.peak_bytes is not None or cm.budget_inline is not None or cm.restarts is not None
        for cm in configs
    )
    if not measured and lane is None and lane_problem is None:
        return []
    fraction = matrix.memory.warn_fraction
    scope = (
        "each execution alone on its simulated mcp-host: plan/memory_model.py"
        if stage == "sim"
        else "per configuration block, the mcp-host container(s) that served it"
    )
    lines = [
        "## mcp-host memory",
        "",
        f"Peak working set against the container's limit ({scope}), restarts and OOM kills, "
        "and tool results kept inline because the step's spillover budget was full.",
        "",
        _row(
            "configuration",
            "peak working set",
            "limit",
            "peak / limit",
            "restarts",
            "OOM kills",
            "kept inline (budget full)",
            "median input tokens",
        ),
        _row(*(["---"] * 8)),
    ]
    for cm in configs:
        inline = (
            "not measured"
            if cm.budget_inline is None
            else f"{cm.budget_inline} in {cm.runs_budget_inline} run(s)"
        )
        tokens = f"{statistics.median(cm.input_tokens):,.0f}" if cm.input_tokens else "n/a"
        lines.append(
            _row(
                cm.config,
                _mib(cm.peak_bytes),
                _mib(cm.limit_bytes),
                _share(cm.peak_bytes, cm.limit_bytes),
                "not measured" if cm.restarts is None else cm.restarts,
                "not measured" if cm.oom_kills is None else cm.oom_kills,
                inline,
                tokens,
            )
        )
    lines.append("")
    if check is not None:
        lines += _check_lines(check, peak_sources(records, stage, lane))
    if lane_problem is not None:
        lines += [
            f"- **Warning:** `{LANE_FILE}` cannot be read: {lane_problem}. The concurrency "
            "lane and the headroom are not shown; run the stage again (`--resume` keeps its "
            f"runs) to write it anew, or remove `{LANE_FILE}`.",
            "",
        ]
    if lane is not None and lane.points:
        sourced = any(p.peak_source for p in lane.points)
        lines += [
            f"**Concurrency lane** ({lane.recipe}/{lane.input}, N executions of the recipe at "
            "once on one mcp-host, started together):",
            "",
            _row(
                "configuration",
                "N at once",
                "peak working set",
                "limit",
                "peak / limit",
                *(["peak from"] if sourced else []),
            ),
            _row(*(["---"] * (6 if sourced else 5))),
        ]
        for p in lane.points:
            peak = _mib(p.peak_bytes) + (" (OOM-killed)" if p.oom else "")
            lines.append(
                _row(
                    p.config,
                    p.executions,
                    peak,
                    _mib(p.limit_bytes),
                    _share(p.peak_bytes, p.limit_bytes),
                    *([f"`{p.peak_source}`" if p.peak_source else "n/a"] if sourced else []),
                )
            )
        lines.append("")
    warnings = memory_warnings(configs, lane, fraction)
    if warnings:
        lines += [f"- **Warning:** {w}" for w in warnings]
    else:
        lines.append(
            f"No configuration came within {fraction:.0%} of its limit, and no mcp-host "
            "restarted or was OOM-killed."
        )
    lines.append("")
    return lines
