"""A whole cluster stage: preflight, the Stage 1 gate, the matrix in configuration
blocks through the operator, the policy restored, the report.

- Stage `minikube` runs the platform's own T2 lane first when the profile names it
  (`stage1_lane`: its verdict and exact head go into `stage.json` as `driver.t2` and
  into the report; a failure stops it), then the preflight (a failure stops it),
  then records the mcp-host version it validates (`cluster/version.py`: the
  profile's `mcp_host_version`, else its `mcp_host_version_source`, else the
  `imageID` of a running mcp-host pod) in `stage.json` (`driver.mcp_host_version`)
  and in the report.
- Stage `dev` starts only when the Stage 1 results directory holds an ACCEPTED
  Stage 1 verdict for the same mcp-host version: its `stage.json` says stage
  `minikube` and that version, and its `verdict.json` holds a decision that was
  reached: one the matrix's decision chain can end in (a step's default or the
  fallback, e.g. `131072`, `32768`, `65536`), not `inconclusive`, and not `false`:
  a Stage 1 that decided spillover off leaves no default for Stage 2 to validate.
  `--override-stage1-false` lets a `false` verdict through (every other check
  stays); `--override-stage1 REASON` lets it start anyway. Either is printed and
  goes into `stage.json` (`provenance.stage1_gate`) and the report.
- `stage.json`'s `provenance` names the profile as given (`--profile`).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from spillover_operator.client import Connection

from spillover_harness.atomic_file import atomic_write_bytes
from spillover_harness.cluster.blocks import check_blocks
from spillover_harness.cluster.configs import PolicyApplier, PolicyGuard
from spillover_harness.cluster.kubeconn import ClusterStageError, Target, connect_profile
from spillover_harness.cluster.platform_lane import LaneResult, run_lane
from spillover_harness.cluster.preflight import PreflightResult, run_preflight
from spillover_harness.cluster.starters import make_starter
from spillover_harness.cluster.version import read_version
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.drivers.cluster import ClusterDriver
from spillover_harness.fixtures import FixtureSet
from spillover_harness.plan.matrix import Matrix
from spillover_harness.profile import Profile
from spillover_harness.results.records import McpHostMemory, RunRecord, read_records
from spillover_harness.results.results_dir import (
    Provenance,
    ResultFileInvalid,
    ResultFileMissing,
    ResultFileUnreadable,
    StageDir,
    VerdictHeader,
    content_hash,
)
from spillover_harness.run.runner import StageOptions, StageResult, run_stage
from spillover_harness.stages.cluster_plan import block_order
from spillover_harness.stages.memory_lane import run_cluster_lane

DEFAULT_STAGE1_DIR = Path("results/minikube")


class PreflightFailed(ClusterStageError):
    def __init__(self, result: PreflightResult) -> None:
        super().__init__("preflight failed")
        self.result = result


class Stage1GateError(ClusterStageError):
    """Stage dev may not start: no accepted Stage 1 verdict for this version."""


def mcp_host_version(profile: Profile, cluster: Connection) -> str:
    """The version the stage validates (`cluster/version.py`)."""
    return read_version(profile, cluster)


def stage1_decided(verdict: Any, matrix: Matrix) -> bool:
    """Whether a Stage 1 verdict reached a decision (it is not `inconclusive`).

    The one place the gate judges a decision: verdict.json's `decided`, written by
    the evaluator. A verdict.json from before that field falls back to the matrix's
    chain (a step's default or the fallback), never a fixed list of values. A mapping
    is read as verdict.json would be (one without a string `decision` decides nothing).
    `verdict`: a `VerdictHeader` (`StageDir.read_verdict_header`) or such a mapping.
    """
    if isinstance(verdict, Mapping):
        try:
            verdict = VerdictHeader.model_validate(verdict)
        except ValidationError:
            return False
    if verdict.decided is not None:
        return bool(verdict.decided)
    reachable = {step.default for step in matrix.decision.chain} | {matrix.decision.fallback}
    return verdict.decision in reachable


STAGE1_FIX = (
    "run Stage 1 first (make validate-minikube), pass --stage1-results DIR, or "
    "--override-stage1 REASON"
)
# The decision that closes the gate though reached: Stage 1 found no default to ship.
SPILLOVER_OFF = "false"


def check_stage1(results: Path, version: str, matrix: Matrix, *, allow_false: bool = False) -> str:
    """A line describing the accepted Stage 1 verdict; Stage1GateError otherwise.

    `matrix` says which decisions count as reached (`stage1_decided`); a reached
    `false` is refused unless `allow_false` (`--override-stage1-false`)."""
    return _gate_line(results, stage1_decision(results, version, matrix), allow_false)


def _gate_line(results: Path, decision: str, allow_false: bool) -> str:
    if decision == SPILLOVER_OFF and not allow_false:
        raise Stage1GateError(
            f"Stage 1 in {results} decided `false` (spillover off): it found no spillover "
            "default for Stage 2 to validate on the dev cluster. Look at its report, fix "
            "what failed and run Stage 1 again, or pass --override-stage1-false "
            "(make validate-dev OVERRIDE_STAGE1_FALSE=1) to run Stage 2 anyway"
        )
    if decision == SPILLOVER_OFF:
        return (
            f"**Stage 1 decided `false`; Stage 2 ran anyway (--override-stage1-false)** ({results})"
        )
    return f"Stage 1 accepted for this mcp-host version: decision {decision} ({results})"


def stage1_decision(results: Path, version: str, matrix: Matrix) -> str:
    """The decision of the Stage 1 verdict in `results`, when it is one Stage 2 may
    follow (a minikube stage on a real platform, this mcp-host version, a decision
    reached); Stage1GateError otherwise."""
    directory = StageDir(results)
    stage_path = directory.stage_file
    fix = STAGE1_FIX
    try:
        stage = directory.read_stage()
        if stage is None:
            raise ResultFileMissing(stage_path, "FileNotFoundError", "no such file")
        verdict = directory.read_verdict_header()
    except (ResultFileMissing, ResultFileUnreadable) as exc:
        raise Stage1GateError(f"no Stage 1 results in {results} ({exc.cause}); {fix}") from None
    except ResultFileInvalid as exc:
        raise Stage1GateError(f"no Stage 1 results in {results} ({exc}); {fix}") from None
    if stage.stage != "minikube":
        raise Stage1GateError(
            f"{stage_path} is a stage '{stage.stage}' result, not minikube; {fix}"
        )
    if stage.simulated_platform:
        raise Stage1GateError(
            f"{stage_path}: that Stage 1 ran on a simulated platform (profile "
            f"{stage.driver.profile!r}: the simulator as mcp-host), "
            f"which validates no mcp-host; {fix}"
        )
    theirs = stage.driver.mcp_host_version
    if theirs != version:
        raise Stage1GateError(
            f"Stage 1 in {results} validated mcp-host {theirs!r}, the dev cluster runs "
            f"{version!r}; {fix}"
        )
    decision: str = verdict.decision
    if not stage1_decided(verdict, matrix):
        raise Stage1GateError(
            f"Stage 1 in {results} has no accepted verdict (decision {decision!r}); {fix}"
        )
    return decision


@dataclass
class ClusterStageOutcome:
    result: StageResult
    version: str
    stage_notes: list[str] = field(default_factory=list)
    restored: str | None = None
    stage1_override: str | None = None  # the reason, when --override-stage1 let dev start
    matrix: Matrix | None = None  # the matrix as the stage ended planned (--until-stable)


Adaptive = Callable[
    [Matrix, StageResult, Callable[[Matrix], StageResult]], tuple[Matrix, StageResult]
]


@dataclass(frozen=True, kw_only=True)
class ClusterStageOptions:
    """What one cluster stage runs, where, and how (`run --stage minikube|dev`)."""

    matrix: Matrix
    stage: str  # "minikube" | "dev"
    profile: Profile
    target: Target
    out_dir: Path
    fixtures: FixtureSet
    resume: bool
    progress: bool = True
    # dev only: the Stage 1 results directory (default results/minikube), or the
    # reason to start without an accepted Stage 1 verdict
    stage1_results: Path | None = None
    override_stage1: str | None = None
    override_stage1_false: bool = False  # dev only: a Stage 1 that decided `false` lets it start
    profile_source: str | None = None  # `--profile` as given (recorded in stage.json)
    skip_preflight: bool = False
    apply_timeout_s: float = 600.0
    matrix_source: str = "<default>"  # how the matrix was given (recorded in stage.json)
    resume_hint: str | None = None  # the command that resumes this stage, for messages
    # runs of one configuration at once (off by default: 1); never two configurations
    concurrency: int = 1
    # run --until-stable: after the matrix's runs, (matrix, result, again) -> the matrix
    # and result once no round is left; `again` runs the stage resumed with a matrix.
    adaptive: Adaptive | None = None


def run_cluster(
    options: ClusterStageOptions, *, cancel: threading.Event, log: Callable[[str], None]
) -> ClusterStageOutcome:
    """Raises ClusterStageError (PreflightFailed, Stage1GateError, ConfigApplyError...)
    or the runner's ResultsDirError / StageAbort."""
    profile, target, matrix, stage = options.profile, options.target, options.matrix, options.stage
    lane: LaneResult | None = None
    if stage == "minikube" and profile.stage1_lane is not None:
        lane = run_lane(profile.stage1_lane, log)  # LaneFailed stops the stage
    if stage == "minikube" and not options.skip_preflight:
        pre = run_preflight(profile, target, stage, matrix, options.fixtures)
        log(pre.render())
        if not pre.ok:
            raise PreflightFailed(pre)
    cluster = connect_profile(profile, target)
    version = mcp_host_version(profile, cluster)
    notes = [f"mcp-host version validated: `{version}`", f"cluster profile: `{profile.name}`"]
    if profile.simulated_platform:
        notes[0] = f"mcp-host version: `{version}` (the simulator's image: nothing is validated)"
    if lane is not None:
        notes.append(lane.line())
    if options.concurrency > 1:
        notes.append(
            f"runs of one configuration ran {options.concurrency} at a time (--concurrency): "
            "durations were measured under concurrency, and no per-run counter delta is used"
        )
    gate: dict[str, object] | None = None
    if stage == "dev":
        line, gate = _stage1_gate(options, version, log)
        notes.append(line)
    applier = PolicyApplier(cluster, profile, timeout_s=options.apply_timeout_s, log=log)
    starter = make_starter(profile, target, cluster)
    driver = ClusterDriver(
        profile,
        cluster,
        applier,
        starter,
        PrometheusCollector.from_profile(profile.prometheus),
        options.fixtures,
        log=log,
    )
    guard = PolicyGuard(applier, log)
    try:
        with guard:
            stage_options = StageOptions(
                resume=options.resume,
                concurrency=options.concurrency,
                progress=options.progress,
                driver_identity={
                    "kind": "cluster",
                    "profile": profile.name,
                    "mcp_host_version": version,
                    **({"simulated_platform": True} if profile.simulated_platform else {}),
                    **({"t2": lane.identity()} if lane is not None else {}),
                },
                matrix_source=options.matrix_source,
                resume_hint=options.resume_hint,
                provenance=Provenance(
                    profile=options.profile_source or profile.name,
                    # the profile's content; `--kubectl` may replace its kubectl command
                    profile_sha256=content_hash(
                        profile.model_dump(mode="json", exclude={"kubectl"})
                    ),
                    stage1_gate=gate,
                ),
                order=lambda jobs: driver.set_plan(
                    block_order(jobs, config_names=[c.name for c in matrix.configurations])
                ),
            )
            result = run_stage(matrix, stage, driver, options.out_dir, stage_options, cancel=cancel)
            if options.adaptive is not None:
                # More rounds on the same driver, under the same guard: one stage.
                def again(extended: Matrix) -> StageResult:
                    more = dataclasses.replace(stage_options, resume=True)
                    return run_stage(extended, stage, driver, options.out_dir, more, cancel=cancel)

                matrix, result = options.adaptive(matrix, result, again)
            checks = check_blocks(driver.prometheus, driver.blocks)
            notes += [f"counters, {line}" for line in checks.lines]
            memory: dict[str, McpHostMemory] = {}
            if not result.interrupted:  # an interrupted stage exits at once
                memory, memory_notes = block_memory(driver)
                notes += memory_notes
                recorded = {r.run_id for r in result.records}  # not the runs cut short
                memory = {k: v for k, v in memory.items() if k in recorded}
            if checks.problems or memory:
                result.records = mark_inconsistent(
                    result.records_path, checks.problems, memory=memory
                )
            if matrix.runs_lane(stage) and not result.interrupted:
                memory_lane = run_cluster_lane(
                    matrix, stage, driver, options.out_dir, cancel=cancel, log=log
                )
                notes += memory_lane.notes
                if memory_lane.lane is not None:
                    written = StageDir(options.out_dir).write_lane(memory_lane.lane)
                    log(f"concurrency lane: {written}")
    finally:
        driver.close()
        starter.close()
    override = options.override_stage1 if stage == "dev" and options.override_stage1 else None
    return ClusterStageOutcome(result, version, notes, guard.restored, override, matrix)


def block_memory(driver: ClusterDriver) -> tuple[dict[str, McpHostMemory], list[str]]:
    """Per run id, its configuration block's mcp-host memory (the last block's read now,
    the others' at their switch, each completed now from what Prometheus scraped after
    its end: no switch waited for a scrape), and the stage notes on how they were read."""
    out: dict[str, McpHostMemory] = {}
    seen: dict[str, list[int]] = {}  # note -> the blocks it is about
    blocks = [b for b in driver.blocks if b.runs]
    for block in blocks:
        driver.capture_block_memory(block)
    driver.finish_block_memory()
    for number, block in enumerate(blocks, start=1):
        mem = block.memory
        if mem is None:
            continue
        for note in mem.notes:
            seen.setdefault(note, []).append(number)
        figures = McpHostMemory(
            peak_bytes=mem.peak_bytes,
            limit_bytes=mem.limit_bytes,
            restarts=mem.restarts,
            oom_kills=mem.oom_kills,
            block=number,
            start_bytes=mem.start_bytes,
            end_bytes=mem.end_bytes,
            peak_source=mem.peak_source if mem.peak_bytes is not None else None,
        )
        for run_id in block.runs:
            out[run_id] = figures
    notes = [f"{note} (block(s) {', '.join(map(str, n))})" for note, n in seen.items()]
    return out, notes


def mark_inconsistent(
    path: Path,
    problems: Mapping[str, list[str]],
    *,
    memory: Mapping[str, McpHostMemory] | None = None,
) -> list[RunRecord]:
    """The stage's records with the block checks' problems added to the runs named
    (`consistency_ok: false` and a `consistency:` note each), and each run's block
    memory (`mcp_host_memory`), written back in one atomic replace (the stage has
    ended: nothing appends any more)."""
    memory = memory or {}
    records = read_records(path)
    # a resumed stage numbers its blocks after those of the runs recorded before
    offset = max(
        (
            r.mcp_host_memory.block or 0
            for r in records
            if r.run_id not in memory and r.mcp_host_memory is not None
        ),
        default=0,
    )
    if offset:
        memory = {
            k: v.model_copy(update={"block": (v.block or 0) + offset}) for k, v in memory.items()
        }
    updated = []
    for r in records:
        update: dict[str, object] = {}
        if r.run_id in problems:
            update["consistency_ok"] = False
            update["notes"] = [*r.notes, *(f"consistency: {p}" for p in problems[r.run_id])]
        if r.run_id in memory:
            update["mcp_host_memory"] = memory[r.run_id]
        updated.append(r.model_copy(update=update) if update else r)
    text = "".join(json.dumps(r.to_json()) + "\n" for r in updated)
    atomic_write_bytes(path, text.encode("utf-8"))
    return updated


def _stage1_gate(
    options: ClusterStageOptions, version: str, log: Callable[[str], None]
) -> tuple[str, dict[str, object]]:
    """Stage dev: the report's note on the Stage 1 gate (passed or overridden) and what
    stage.json records of it (`provenance.stage1_gate`); Stage1GateError when closed."""
    if options.override_stage1:
        log(f"Stage 1 gate OVERRIDDEN: {options.override_stage1}")
        return f"**Stage 1 gate overridden**: {options.override_stage1}", {
            "status": "overridden",
            "flag": "--override-stage1",
            "reason": options.override_stage1,
        }
    results = options.stage1_results or DEFAULT_STAGE1_DIR
    decision = stage1_decision(results, version, options.matrix)
    line = _gate_line(results, decision, options.override_stage1_false)
    log(line)
    gate: dict[str, object] = {
        "status": "accepted",
        "stage1_results": str(results),
        "stage1_decision": decision,
    }
    if decision == SPILLOVER_OFF:
        gate.update(status="overridden", flag="--override-stage1-false")
    return line, gate
