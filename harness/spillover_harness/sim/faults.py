"""The simulator's fault switches, by the name `run --fault` takes: what each plants in
the simulated mcp-host and which check of the report it proves (docs/simulator.md §3).

One catalogue for the CLI's choices and help, the stage's `SimFaults` and `make faults`
(`studies/faults.py`), so a switch cannot exist in one and be missing from another. A
faulted stage is a test of the harness, never a decision to apply: apply-decision
refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spillover_harness.sim.steprun import DRIFTED_DEFAULT_THRESHOLD, SimFaults

__all__ = ["FAULTY_STORE_OVERHEAD", "FAULT_SWITCHES", "FaultSwitch", "fault_help", "sim_faults"]

# `store-overhead`: the store keeps 15% more than it stores (the PR claims about 7%).
FAULTY_STORE_OVERHEAD = 1.15


@dataclass(frozen=True)
class FaultSwitch:
    """One `--fault`: what the broken mcp-host does, and the check that must catch it."""

    name: str
    plants: str
    proves: str


FAULT_SWITCHES: tuple[FaultSwitch, ...] = (
    FaultSwitch(
        "spill-to-disk",
        "write spilled results under <run output dir>/.spill",
        "no_leak (disk)",
    ),
    FaultSwitch("log-results", "log tool-result content", "no_leak (logs)"),
    FaultSwitch(
        "ignore-env",
        "run with the defaults whatever the environment says",
        "consistency (the configuration in effect)",
    ),
    FaultSwitch(
        "default-threshold",
        f"the default threshold drifted to {DRIFTED_DEFAULT_THRESHOLD}",
        "consistency (the default threshold)",
    ),
    FaultSwitch(
        "first-party",
        "feed the first-party spillover counters too",
        "consistency (the first-party counters stay still)",
    ),
    FaultSwitch(
        "store-overhead",
        f"the store takes {FAULTY_STORE_OVERHEAD:.2f} bytes of memory per byte it stores",
        "memory claim (the store's own bytes at a full budget against the PR's +7%)",
    ),
    FaultSwitch(
        "store-leak",
        "the store is never freed when its step execution ends",
        "memory leak (the working set after an execution against before it)",
    ),
    FaultSwitch(
        "budget-unreported",
        "the budget warning is worded so that no pattern finds it",
        "budget measured or not measured (never a silent 0)",
    ),
    FaultSwitch(
        "status-report-grows",
        "the status report carries every stored result's summary",
        "status report size (against the baseline's)",
    ),
    FaultSwitch(
        "read-tool-denied",
        "the read tool is refused to recipes restricted by allowedTools.include",
        "quality (criterion 4's judges: reviews and summaries no worse than off's)",
    ),
)

_NAMES = {f.name for f in FAULT_SWITCHES}


def fault_help() -> str:
    """`--fault`'s help: every switch and what it plants."""
    return "; ".join(f"{f.name}: {f.plants}" for f in FAULT_SWITCHES)


def sim_faults(names: Sequence[str]) -> SimFaults:
    """The simulator's fault switches for the `--fault` names given (ValueError for a
    name the catalogue does not have: the CLI's choices refuse it first)."""
    unknown = sorted(set(names) - _NAMES)
    if unknown:
        raise ValueError(f"unknown fault(s): {', '.join(unknown)}")
    return SimFaults(
        write_spill_to_disk="spill-to-disk" in names,
        log_tool_results="log-results" in names,
        ignore_env="ignore-env" in names,
        default_threshold=DRIFTED_DEFAULT_THRESHOLD if "default-threshold" in names else None,
        feed_first_party="first-party" in names,
        store_overhead=FAULTY_STORE_OVERHEAD if "store-overhead" in names else None,
        store_leak="store-leak" in names,
        budget_unreported="budget-unreported" in names,
        status_report_grows="status-report-grows" in names,
        read_tool_denied="read-tool-denied" in names,
    )
