"""The embedded simulator as a driver: one simulated step execution per job.

Each run writes, under `job.out_dir/runs/<run_id>/`:
- `output/`: the step's output directory (`review.md` or `summary.md` when the
  step succeeded, `result.json` always; a broken mcp-host puts `.spill/` here);
- `logs.jsonl`: every log line of the run (step, mcp-host, coordinator);
- `status-report.json`: the body the step sent to the coordinator (`bodyBytes`).

Then it checks the run like cluster mode does: `.spill` entries under the run
directory after every iteration and at the end (`disk_clean`), the log lines read
back from `logs.jsonl` scanned for the fixture's canaries (`logs_clean`), the
output judged by the quality checks (`quality_ok`), and whether the mcp-host did
what the configuration says (`consistency_ok`, checks/consistency.py: what it
persisted against the fixture's result sizes, and the first-party counters of
the run's own registry, which workflow runs must not move). A handoff
configuration has no spillover env to hold it to: its consistency is not checked.

The inputs are one FixtureSet for the whole driver (the same inputs for every
run, as on a real platform): the one given, else `build_fixtures(fixture_seed)`,
else the fixtures of the default matrix's seed (what `spillover-harness fixtures
export` writes by default). `job.seed` (the runner derives it from the cell and
the repetition, not the configuration) seeds the scripted agent; `model` (the
matrix's `sim_model:`, docs/simulator.md §1.5) says how it reads and its limits. A run is
deterministic for (fixtures, job.seed, config env, recipe, input, repetition),
apart from its timestamps.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from spillover_harness.checks import find_spill_entries, judge_output, scan_logs_for_canaries
from spillover_harness.checks.consistency import (
    FIRST_PARTY,
    check_run,
    first_party_moved,
    may_fill_budget,
)
from spillover_harness.collectors.logs import budget_reached
from spillover_harness.drivers.base import RunJob
from spillover_harness.fixtures import Fixture, FixtureSet, fixtures_for
from spillover_harness.plan.memory_model import MemoryModel
from spillover_harness.plan.sim_model import SimModel
from spillover_harness.profile import LogPatterns
from spillover_harness.results.records import (
    FAULTS_NOTE,
    McpHostMemory,
    RunRecord,
    not_before,
    now_rfc3339,
)
from spillover_harness.sim.handoff import HandoffSettings
from spillover_harness.sim.metrics import SpilloverMetrics
from spillover_harness.sim.step import run_step
from spillover_harness.sim.steprun import SimFaults, StepLimits, StepRun

__all__ = ["SimDriver"]

SIM_NOTE = "simulated: figures come from the simulator's model (docs/simulator.md)"
MAX_NOTES_PER_CHECK = 5


class SimDriver:
    """Runs jobs on the embedded simulator. Thread-safe: one instance serves a stage."""

    def __init__(
        self,
        faults: SimFaults = SimFaults(),  # noqa: B008 (frozen, immutable)
        fixtures: FixtureSet | None = None,
        *,
        fixture_seed: int | None = None,
        limits: StepLimits | None = None,
        model: SimModel | None = None,
        memory: MemoryModel | None = None,
    ) -> None:
        self.faults = faults
        self.memory = memory if memory is not None else MemoryModel()
        self.model = model if model is not None else SimModel()
        self.limits = limits if limits is not None else StepLimits.from_model(self.model)
        self._fixtures = fixtures
        self._fixture_seed = fixture_seed
        self._lock = threading.Lock()

    @property
    def fixtures(self) -> FixtureSet:
        """The driver's inputs, built on first use when none were given."""
        with self._lock:
            if self._fixtures is None:
                self._fixtures = fixtures_for(self._fixture_seed)
            return self._fixtures

    def parameters(self) -> dict[str, Any]:
        """The simulator's parameter values in effect (stage.json's provenance): the
        agent model (its iteration cap and context window as the steps run them) and the
        simulated mcp-host's memory."""
        model = asdict(self.model)
        model["max_iterations"] = self.limits.max_iterations
        model["context_window_tokens"] = self.limits.context_window_tokens
        return {"model": model, "memory": asdict(self.memory)}

    def run(self, job: RunJob, cancel: threading.Event) -> RunRecord:
        started = now_rfc3339()
        try:
            return self._run(job, cancel, started)
        except Exception as exc:  # a broken run is a record, never a crash of the stage
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
            return self._record(
                job,
                started,
                outcome="harness_error",
                notes=[f"simulator error: {type(exc).__name__}: {exc}{where}"],
            )

    # -- internals -----------------------------------------------------------------------

    def _record(self, job: RunJob, started: str, **fields: object) -> RunRecord:
        data: dict[str, object] = {
            **job.identity(),
            "started_at": started,
            "finished_at": now_rfc3339(),
        }
        data.update(fields)
        data["finished_at"] = not_before(started, str(data["finished_at"]))
        active = [f.name for f in dataclasses.fields(self.faults) if getattr(self.faults, f.name)]
        if active:  # the record itself says so: stage.json alone can be edited
            noted = list(fields.get("notes") or [])  # type: ignore[call-overload]
            data["notes"] = [*noted, f"{FAULTS_NOTE}{', '.join(active)}"]
        return RunRecord.model_validate(data)

    def _run(self, job: RunJob, cancel: threading.Event, started: str) -> RunRecord:
        fixture = self.fixtures.get(job.recipe, job.input.name)
        notes = [SIM_NOTE]
        if fixture.size_class != job.input.size_class:
            notes.append(
                f"the matrix declares size class '{job.input.size_class}', the fixture is "
                f"'{fixture.size_class}'"
            )
        run_dir = Path(job.out_dir) / "runs" / job.run_id
        if run_dir.exists():  # a run done again (e.g. after an interrupted stage) starts clean
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        output_dir = run_dir / "output"
        seen_during: list[Path] = []

        def check_disk(_iteration: int) -> None:
            if not seen_during:
                seen_during.extend(find_spill_entries(run_dir))

        logs_path = run_dir / "logs.jsonl"
        # The run's own counters: the stage runs concurrently, so a shared registry's
        # movement could not be told apart per run (the first-party check reads them).
        metrics = SpilloverMetrics()
        with logs_path.open("w", encoding="utf-8") as stream:
            run: StepRun = run_step(
                fixture=fixture,
                env=job.config.env,
                seed=job.seed,
                repetition=job.repetition,
                run_id=job.run_id,
                output_dir=output_dir,
                faults=self.faults,
                metrics=metrics,
                limits=replace(self.limits, timeout_s=job.timeout_s),
                cancel=cancel,
                log_stream=stream,
                on_iteration=check_disk,
                model=self.model,
                handoff=_handoff(job),
                memory=self.memory,
            )
        (run_dir / "status-report.json").write_bytes(run.status_report)

        spill_after = find_spill_entries(run_dir)
        spill = sorted(set(seen_during) | set(spill_after))
        for path in spill[:MAX_NOTES_PER_CHECK]:
            notes.append(f"disk: spill entry {path.relative_to(run_dir).as_posix()}")
        if len(spill) > MAX_NOTES_PER_CHECK:
            notes.append(f"disk: {len(spill) - MAX_NOTES_PER_CHECK} more spill entries")
        leaks = scan_logs_for_canaries(
            logs_path.read_text(encoding="utf-8").splitlines(), fixture.canaries
        )
        notes += [f"logs: {leak}" for leak in leaks[:MAX_NOTES_PER_CHECK]]
        if len(leaks) > MAX_NOTES_PER_CHECK:
            notes.append(f"logs: {len(leaks) - MAX_NOTES_PER_CHECK} more lines with canaries")
        notes += run.notes
        quality = None if run.outcome == "aborted" else judge_output(run.output_text, fixture)
        if run.cache_evictions or run.cache_ref_misses:
            notes.append(
                f"handoff cache: {run.cache_evictions} evictions, {run.cache_ref_misses} ref misses"
            )
        consistency = _consistency(job, fixture, run, metrics)
        notes += [f"consistency: {c}" for c in consistency or []]
        budget_inline = None
        if _handoff(job) is None:  # the handoff cache has no byte budget: nothing to count
            budget_inline, why = _budget_inline(job, fixture, logs_path)
            notes += [why] if why else []
        return self._record(
            job,
            started,
            consistency_ok=None if consistency is None else not consistency,
            mcp_host_memory=self._memory(run),
            budget_inline=budget_inline,
            cache_evictions=run.cache_evictions,
            cache_ref_misses=run.cache_ref_misses,
            outcome=run.outcome,
            hit_iteration_limit=run.hit_iteration_limit,
            iterations=run.iterations,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            duration_s=float(run.duration_s),
            spillover_persisted=run.persisted,
            spillover_reads=run.reads,
            status_report_bytes=len(run.status_report),
            quality_ok=quality,
            disk_clean=not spill,
            logs_clean=not leaks,
            notes=notes,
        )

    def _memory(self, run: StepRun) -> McpHostMemory:
        """The execution's memory, modelled (plan/memory_model.py): alone on its mcp-host,
        the working set back to the baseline at its end unless its store leaked."""
        killed = int(run.oom_killed)
        stored = run.store_peak_bytes > 0
        return McpHostMemory(
            peak_bytes=run.peak_bytes,
            limit_bytes=self.memory.limit_bytes,
            restarts=killed,
            oom_kills=killed,
            start_bytes=self.memory.baseline_bytes,
            end_bytes=self.memory.baseline_bytes + run.leaked_bytes,
            store_bytes=run.store_peak_cost if stored else None,
            store_results_bytes=run.store_peak_bytes if stored else None,
        )


def _budget_inline(job: RunJob, fixture: Fixture, logs_path: Path) -> tuple[int | None, str | None]:
    """The record's `budget_inline` read as on a cluster: the budget warning among the
    run's log lines, with the shipped profiles' pattern (collectors/logs.py)."""
    may_fill = may_fill_budget(job.config.env, fixture)
    lines = logs_path.read_text(encoding="utf-8").splitlines()
    return budget_reached(lines, LogPatterns().budget_inline, may_fill)


def _consistency(
    job: RunJob, fixture: Fixture, run: StepRun, metrics: SpilloverMetrics
) -> list[str] | None:
    """The run's consistency problems (empty: consistent); None for a handoff run."""
    if job.config.strategy == "handoff":
        return None
    problems = check_run(job.config.env, fixture, run.persisted, run.outcome) or []
    return problems + first_party_moved({name: metrics.value(name) for name in FIRST_PARTY})


def _handoff(job: RunJob) -> HandoffSettings | None:
    """The handoff cache's settings of a `strategy: handoff` configuration, else None."""
    spec = job.config.handoff
    if job.config.strategy != "handoff" or spec is None:
        return None
    return HandoffSettings(spec.threshold_tokens, spec.max_entries, spec.preview_chars)
