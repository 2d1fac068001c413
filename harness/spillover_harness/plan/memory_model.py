"""The simulated mcp-host's memory (docs/simulator.md §9).

The seed names memory as spillover's first risk: one mcp-host serves every concurrent
run of a recipe, and each step execution holds its stored results until it ends. The
model, per step execution:

- what it holds beyond the process's baseline is its prompt (the conversation so far,
  tool results inline included) plus its store's held bytes times `store_overhead`
  (the seed measured the store at +17.2 MB for a full 16 MiB budget against +16.0 MB
  inline: about 7.5% more per byte);
- the store's bytes are freed when the execution ends (the store is dropped), the
  prompt with them;
- a process whose working set would pass `limit_bytes` is OOM-killed: the execution
  fails (and, on a real mcp-host, every other one it served at that instant).

An execution's `trace` is what it holds at each instant of simulated time (a step
function, 0 after its end); `peak_at_once` adds up traces started together, which is
how the concurrency lane (`run/concurrency.py`) gets N executions' peak without
depending on thread timing.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["MIB", "MemoryModel", "Trace", "peak_at_once"]

MIB = 1024 * 1024

Trace = list[tuple[float, int]]
"""(simulated seconds since the execution started, bytes it holds from then on)."""


@dataclass(frozen=True)
class MemoryModel:
    """The simulated mcp-host's memory: its baseline, its limit, the store's overhead."""

    baseline_bytes: int = 160 * MIB
    limit_bytes: int = 2048 * MIB  # the seed: the mcp-host pod's limit is 2Gi
    store_overhead: float = 1.075

    def store_cost(self, store_bytes: int) -> int:
        """The memory the store takes for `store_bytes` of results: rounded down, exactly
        (a float product could round a ratio a byte past the overhead it models)."""
        return math.floor(store_bytes * Fraction(str(self.store_overhead)))

    def held(self, prompt_bytes: int, store_bytes: int) -> int:
        """What one execution holds beyond the baseline."""
        return prompt_bytes + self.store_cost(store_bytes)

    def working_set(self, held: int) -> int:
        return self.baseline_bytes + held

    def over_limit(self, held: int) -> bool:
        return self.working_set(held) > self.limit_bytes


def _value_at(trace: Trace, times: list[float], t: float) -> int:
    i = bisect.bisect_right(times, t) - 1
    return trace[i][1] if i >= 0 else 0


def peak_at_once(traces: Sequence[Trace], model: MemoryModel) -> int:
    """The working set's peak when these executions all start at the same instant on
    one mcp-host: the baseline plus the largest sum of what they hold at one instant."""
    if not traces:
        return model.baseline_bytes
    times = [[t for t, _ in trace] for trace in traces]
    instants = sorted({t for trace in traces for t, _ in trace})
    peak = 0
    for t in instants:
        peak = max(peak, sum(_value_at(tr, ts, t) for tr, ts in zip(traces, times, strict=True)))
    return model.working_set(peak)
