"""What a simulated step execution is given (limits, faults) and what it produced."""

from __future__ import annotations

from dataclasses import dataclass, field

from spillover_harness.plan.sim_model import SimModel
from spillover_harness.sim.config import SpilloverConfig
from spillover_harness.sim.logs import StepLog

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_ITERATIONS",
    "DRIFTED_DEFAULT_THRESHOLD",
    "SimFaults",
    "StepLimits",
    "StepRun",
]

DEFAULT_MAX_ITERATIONS = SimModel().max_iterations
DEFAULT_CONTEXT_WINDOW = SimModel().context_window_tokens


@dataclass(frozen=True)
class StepLimits:
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    context_window_tokens: int = DEFAULT_CONTEXT_WINDOW
    timeout_s: float | None = None

    @classmethod
    def from_model(cls, model: SimModel, timeout_s: float | None = None) -> StepLimits:
        """The limits a step runs with under `model` (its iteration cap and context window)."""
        return cls(model.max_iterations, model.context_window_tokens, timeout_s)


# The drifted default of the `default_threshold` fault (`run --fault default-threshold`).
DRIFTED_DEFAULT_THRESHOLD = 32768


@dataclass(frozen=True)
class SimFaults:
    """Switches that make the simulated mcp-host misbehave like a broken one.

    Criterion 5 must catch both: `write_spill_to_disk` writes every spilled result
    under `<output dir>/.spill/`; `log_tool_results` logs the content of every
    tool result the spillover interceptor sees (when spillover is enabled).

    The consistency checks (checks/consistency.py) must catch the others:
    `ignore_env` runs with the defaults whatever the environment says;
    `default_threshold` is a drifted default (e.g. 32768) used when THRESHOLD is
    unset; `feed_first_party` also counts each stored result and read-back on the
    first-party counters (`clerum_spillover_*_total`).

    The memory check (report/memory_check.py) must catch two: `store_overhead` makes
    the store take that many bytes of memory per byte it stores (its claim reads
    `above`); `store_leak` never frees a store when its execution ends (its leak reads
    `leak`). `budget_unreported` words the budget warning differently, so no pattern
    finds it (a run that filled its budget reads "not measured", never 0).
    `status_report_grows` copies every stored result's summary into the status report
    (the status report check reads `grows`). `read_tool_denied` applies a recipe's
    `allowedTools.include` to the read tool too, though the owners excepted it: the read
    tool is never offered (the quality judges and criterion 4 fail).
    """

    write_spill_to_disk: bool = False
    log_tool_results: bool = False
    ignore_env: bool = False
    default_threshold: int | None = None
    feed_first_party: bool = False
    store_overhead: float | None = None
    store_leak: bool = False
    budget_unreported: bool = False
    status_report_grows: bool = False
    read_tool_denied: bool = False


@dataclass
class StepRun:
    """Everything a simulated step execution produced and the harness can observe."""

    run_id: str
    step_id: str
    execution_id: str
    config: SpilloverConfig
    outcome: str = "failed"  # succeeded | failed | aborted | timed_out
    error: str | None = None
    hit_iteration_limit: bool = False
    iterations: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    tools_called: int = 0
    persisted: int = 0
    reads: int = 0
    budget_fallbacks: int = 0
    # the mcp-host's memory (plan/memory_model.py): what this execution held over simulated
    # time, its working set's peak (the limit when it was OOM-killed), and whether it was
    memory_trace: list[tuple[float, int]] = field(default_factory=list)
    peak_bytes: int = 0
    oom_killed: bool = False
    # the store at its fullest: the results' bytes it held and the memory they took
    # (plan/memory_model.py's store_cost); what it still held after the end (a leak)
    store_peak_bytes: int = 0
    store_peak_cost: int = 0
    leaked_bytes: int = 0
    cache_evictions: int | None = None  # the handoff cache only (None: spillover)
    cache_ref_misses: int | None = None
    output_text: str | None = None
    status_report: bytes = b""
    prompt_sizes: list[int] = field(default_factory=list)
    prompt_digests: list[str] = field(default_factory=list)
    prompts: list[bytes] = field(default_factory=list)  # only with capture_prompts
    offered_tools: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log: StepLog | None = None

    def log_lines(self) -> list[str]:
        return self.log.lines() if self.log is not None else []
