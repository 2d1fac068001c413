"""The embedded simulator: a model of the platform's workflow step with the mcp-host's
spillover store (docs/reference.md §1), scripted seeded agents, and an HTTP front end
(`spillover_harness.sim.server`). See docs/simulator.md."""

from __future__ import annotations

from spillover_harness.sim.config import SpilloverConfig, parse_spillover_env
from spillover_harness.sim.metrics import PERSISTED_METRIC, READS_METRIC, SpilloverMetrics
from spillover_harness.sim.prompt import tokens
from spillover_harness.sim.step import run_step
from spillover_harness.sim.steprun import SimFaults, StepLimits, StepRun
from spillover_harness.sim.store import READ_TOOL, SpilloverStore, serialize_result

__all__ = [
    "PERSISTED_METRIC",
    "READS_METRIC",
    "READ_TOOL",
    "SimFaults",
    "SpilloverConfig",
    "SpilloverMetrics",
    "SpilloverStore",
    "StepLimits",
    "StepRun",
    "parse_spillover_env",
    "run_step",
    "serialize_result",
    "tokens",
]
