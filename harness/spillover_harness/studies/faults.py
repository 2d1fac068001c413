"""`make faults`: every simulator fault switch planted in a stage of its own, and whether
the check it exists for caught it (docs/simulator.md §3).

A check that cannot fail lends false authority: each switch (`sim/faults.py`) plants the
defect one check of the report exists to catch, at the size the seed names, and the
check must then read its failing value, from a clean stage of the same matrix reading
its passing one (a check that already fails on the clean stage proves nothing). Where
the check is part of the decision, the decision must change too. A switch whose proof
exercised nothing (no run of the clean stage filled the budget, say) is a miss.

Pure but for `run_faults`: the proofs read two `Outcome`s; the stage runner and the
judge (the CLI's, which adds the memory and status report checks) are passed in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import Verdict
from spillover_harness.sim.faults import FAULT_SWITCHES, FaultSwitch

__all__ = ["PROOFS", "FaultResult", "MatrixKind", "Outcome", "Proof", "run_faults"]

MatrixKind = Literal["checks", "memory"]


@dataclass(frozen=True)
class Outcome:
    """A judged stage: its verdict (with the memory and status report checks) and records."""

    verdict: Verdict
    records: list[RunRecord]

    @property
    def decided_config(self) -> str:
        """The first configuration of the decision's chain: the one the checks are read on."""
        return next(iter(self.verdict.configs))


Reading = tuple[bool, str]  # (caught, what the check read, clean -> faulted)


@dataclass(frozen=True)
class Proof:
    """How one switch is proven: the matrix it runs on, and how its check is read."""

    switch: str
    matrix: MatrixKind
    read: Callable[[Outcome, Outcome], Reading]


@dataclass(frozen=True)
class FaultResult:
    switch: FaultSwitch
    caught: bool
    detail: str

    def line(self) -> str:
        state = "caught" if self.caught else "MISSED"
        return f"{self.switch.name}: {self.switch.proves}: {state} ({self.detail})"


def _decision(clean: Outcome, faulted: Outcome) -> tuple[bool, str]:
    a, b = clean.verdict.decision, faulted.verdict.decision
    return a != b, f"decision {a} -> {b}"


def _criterion(name: str) -> Callable[[Outcome, Outcome], Reading]:
    """The criterion fails on the decided configuration, and the decision changes."""

    def read(clean: Outcome, faulted: Outcome) -> Reading:
        config = clean.decided_config
        was = clean.verdict.configs[config].criteria[name].status
        now = faulted.verdict.configs[config].criteria[name].status
        changed, decision = _decision(clean, faulted)
        caught = was == "pass" and now == "fail" and changed
        return caught, f"{config} {name}: {was} -> {now}; {decision}"

    return read


def _consistency(clean: Outcome, faulted: Outcome) -> Reading:
    """A run's consistency check broke (no configuration with a broken run can pass)."""
    before = sum(len(c.consistency) for c in clean.verdict.configs.values())
    broken = {n: len(c.consistency) for n, c in faulted.verdict.configs.items() if c.consistency}
    changed, decision = _decision(clean, faulted)
    said = ", ".join(f"{n} {k} run(s)" for n, k in broken.items()) or "no run"
    caught = before == 0 and bool(broken) and changed
    return caught, f"consistency broken: {before} run(s) -> {said}; {decision}"


def _memory(field: Literal["claim", "leak"], good: str, bad: str) -> Callable[..., Reading]:
    """The memory check's reading on the decided configuration goes from good to bad."""

    def read(clean: Outcome, faulted: Outcome) -> Reading:
        config = clean.decided_config
        a, b = clean.verdict.memory, faulted.verdict.memory
        was = "absent" if a is None else getattr(a.configs[config], field)
        now = "absent" if b is None else getattr(b.configs[config], field)
        return was == good and now == bad, f"{config} memory {field}: {was} -> {now}"

    return read


def _budget(clean: Outcome, faulted: Outcome) -> Reading:
    """Every run that filled its budget on the clean stage reads null, never 0."""
    filled = {r.run_id for r in clean.records if r.budget_inline == 1}
    by_id = {r.run_id: r.budget_inline for r in faulted.records}
    nulls = sum(by_id.get(i, 0) is None for i in filled)
    zeros = sum(by_id.get(i) == 0 for i in filled)
    caught = bool(filled) and nulls == len(filled)
    return caught, (
        f"{len(filled)} run(s) filled the budget: budget_inline null in {nulls}, 0 in {zeros}"
    )


def _status_report(clean: Outcome, faulted: Outcome) -> Reading:
    config = clean.decided_config
    a, b = clean.verdict.status_report, faulted.verdict.status_report
    was = "absent" if a is None else a.configs[config].reading
    now = "absent" if b is None else b.configs[config].reading
    return was == "flat" and now == "grows", f"{config} status report: {was} -> {now}"


PROOFS: tuple[Proof, ...] = (
    Proof("spill-to-disk", "checks", _criterion("no_leak")),
    Proof("log-results", "checks", _criterion("no_leak")),
    Proof("ignore-env", "checks", _consistency),
    Proof("default-threshold", "checks", _consistency),
    Proof("first-party", "checks", _consistency),
    Proof("store-overhead", "memory", _memory("claim", "within", "above")),
    Proof("store-leak", "memory", _memory("leak", "none", "leak")),
    Proof("budget-unreported", "memory", _budget),
    Proof("status-report-grows", "checks", _status_report),
    Proof("read-tool-denied", "checks", _criterion("summary_quality")),
)

# A stage of `matrix` with these faults into `out_dir`, judged: the caller's (it runs
# through the stage runner and the CLI's judge).
RunStage = Callable[[Matrix, Sequence[str], Path], Outcome]


def run_faults(
    matrices: dict[MatrixKind, Matrix],
    run_stage: RunStage,
    out_dir: Path,
    *,
    only: Sequence[str] = (),
    cancel: threading.Event | None = None,
    on_result: Callable[[FaultResult], None] | None = None,
) -> list[FaultResult]:
    """Each switch (`only`: those named) in a stage of its own beside one clean stage
    per matrix; `on_result` hears each as it is judged."""
    switches = {s.name: s for s in FAULT_SWITCHES}
    clean: dict[MatrixKind, Outcome] = {}
    results: list[FaultResult] = []
    for proof in PROOFS:
        if (only and proof.switch not in only) or (cancel is not None and cancel.is_set()):
            continue
        kind = proof.matrix
        if kind not in clean:
            clean[kind] = run_stage(matrices[kind], (), out_dir / kind / "clean")
        faulted = run_stage(matrices[kind], (proof.switch,), out_dir / kind / proof.switch)
        caught, detail = proof.read(clean[kind], faulted)
        result = FaultResult(switches[proof.switch], caught, detail)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
