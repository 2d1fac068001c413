"""Runs one stage of the matrix and records every run durably.

Plan
    Every (configuration, recipe, input, repetition) of the stage, in an order
    that interleaves the configurations: repetition first, then cell, then the
    configurations rotated by one per cell. The first records of a stage are
    therefore never all `off`, and a stage cut short still compares the
    configurations on the same cells (a drift of the platform over time hits
    all configurations alike).

Identity
    `run_id` is `{stage}-{config}-{recipe}-{input}-r{rep}-{hash8}`: readable,
    and the short hash of the exact names keeps it unique even when names
    differ only by characters that are not kept in the readable part. Seeds are
    derived from `matrix.seed`, the cell and the repetition, and NOT from the
    configuration: the three configurations of a cell and repetition meet the
    same scripted agent, so their differences come from the configuration alone.

Durability
    Each record is appended to `<out>/runs.jsonl` (one line, flushed and
    fsynced) as its run finishes. `<out>/stage.json` names the matrix, the
    stage and the driver that made the records; `--resume` refuses a directory
    made by anything else (saying what differs), and without `--resume` a
    directory that already holds records is refused: records are never
    overwritten. One process writes a directory at a time (results/results_dir.py).

Timeouts (a documented choice)
    A run gets `run_timeout_s` (the job carries it; a driver may enforce it
    itself). When it is over, the runner sets the run's cancel event and gives
    the driver `cancel_grace_s` to stop. If the driver returns, the run is
    recorded as `timed_out` (whatever the driver reported besides: its notes
    are kept, a note says the harness stopped it). If the driver does not
    return in time, the harness could not observe how the run ended, so the
    record is `harness_error` (left out of every criterion, counted and
    reported), not `timed_out`: a timeout must be something the system did,
    not something the harness guessed. The stuck driver call is abandoned on
    a daemon thread; it no longer counts against the concurrency, and a late
    return is ignored (the run is already recorded).

Interruption
    When `cancel` is set (the CLI sets it on SIGINT/SIGTERM) the runner stops
    starting runs, cancels the running ones and waits up to `cancel_grace_s`
    for them. Runs that were cancelled by the interruption are NOT recorded
    (their outcome says something about the harness, not about spillover);
    `--resume` runs them again. Every record that finished before is on disk.

Driver exceptions
    A driver that raises instead of returning a record yields a
    `harness_error` record whose note names the exception type (its message is
    cut short: records never carry tool-result content).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

from spillover_harness.drivers.base import Driver, RunJob, StageAbort
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import (
    STAGES,
    RecordError,
    RecordLog,
    RunKey,
    RunRecord,
    now_rfc3339,
    run_id_for,
)
from spillover_harness.results.results_dir import (
    DEFAULT_MATRIX_SOURCE,
    Provenance,
    ResultsDirError,
    StageDir,
    StageSetup,
    hold_results_dir,
    prepare_results_dir,
)
from spillover_harness.run.progress import Progress

DEFAULT_CANCEL_GRACE_S = 10.0
_NOTE_MAX = 200
_POLL_S = 0.05


@dataclass
class StageResult:
    """What a call of `run_stage` did, and every record of the stage now on disk."""

    stage: str
    out_dir: Path
    records_path: Path
    planned: int
    already_recorded: int
    recorded_now: int
    records: list[RunRecord]
    interrupted: bool
    wall_s: float
    abandoned: list[str] = field(default_factory=list)  # run_ids of drivers that never returned
    discarded: int = 0  # runs cancelled by the interruption (not recorded; resume reruns them)
    repaired_from: Path | None = None  # where a torn last line was moved aside

    @property
    def missing(self) -> int:
        """Planned runs with no record yet (nonzero only after an interruption)."""
        return self.planned - len({r.key for r in self.records})

    @property
    def outcomes(self) -> Counter[str]:
        return Counter(r.outcome for r in self.records)


# ---------------------------------------------------------------------------------------
# the plan


def seed_for(matrix: Matrix, recipe: str, input_name: str, repetition: int) -> int:
    """A 32-bit seed from the matrix seed, the cell and the repetition (not the config)."""
    text = f"{matrix.seed}\x1f{recipe}\x1f{input_name}\x1f{repetition}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big")


def plan_jobs(matrix: Matrix, stage: str, out_dir: Path) -> list[RunJob]:
    """Every run of the stage, configurations interleaved (see the module docstring)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (known: {', '.join(STAGES)})")
    cells = matrix.cells()
    reps = {(r.name, i.name): matrix.repetitions_for(stage, r.name, i.name) for r, i in cells}
    configs = list(matrix.configurations)
    n = len(configs)
    jobs: list[RunJob] = []
    for rep in range(1, max(reps.values(), default=0) + 1):
        for cell_index, (recipe, spec) in enumerate(cells):
            if rep > reps[(recipe.name, spec.name)]:
                continue  # an extension adds repetitions to some cells only
            offset = (cell_index + rep - 1) % n
            for config in configs[offset:] + configs[:offset]:
                key = RunKey(stage, config.name, recipe.name, spec.name, rep)
                jobs.append(
                    RunJob(
                        run_id=run_id_for(key),
                        stage=stage,
                        config=config,
                        recipe=recipe.name,
                        input=spec,
                        repetition=rep,
                        seed=seed_for(matrix, recipe.name, spec.name, rep),
                        timeout_s=matrix.run_timeout_s,
                        out_dir=out_dir,
                    )
                )
    return jobs


def job_key(job: RunJob) -> RunKey:
    return RunKey(job.stage, job.config.name, job.recipe, job.input.name, job.repetition)


def cell_label(job: RunJob) -> str:
    return f"{job.recipe}/{job.input.name} {job.config.name} r{job.repetition}"


# ---------------------------------------------------------------------------------------
# running


@dataclass
class _Active:
    job: RunJob
    cancel: threading.Event
    started_at: str
    deadline: float
    reason: str | None = None  # "timeout" or "stop" once the runner cancelled it
    cancelled_at: float = 0.0


def _short(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= _NOTE_MAX else first[: _NOTE_MAX - 1] + "…"


def harness_error_record(job: RunJob, started_at: str, note: str) -> RunRecord:
    """A record for a run the harness could not run or observe."""
    return RunRecord.model_validate(
        {
            **job.identity(),
            "outcome": "harness_error",
            "started_at": started_at,
            "finished_at": now_rfc3339(),
            "notes": [note],
        }
    )


def _settle(
    active: _Active, result: RunRecord | BaseException, *, cancelled: bool, timeout_s: float
) -> RunRecord:
    """The record to keep for a run whose driver returned (or raised).

    `cancelled`: the run's cancel event was already set when the driver returned.
    """
    job = active.job
    timed_out = cancelled and active.reason == "timeout"
    if isinstance(result, BaseException):
        note = f"the driver raised {type(result).__name__}: {_short(str(result))}"
        if timed_out:
            note += f" (after the harness cancelled it at run_timeout_s={timeout_s:g}s)"
        return harness_error_record(job, active.started_at, note)
    if not isinstance(result, RunRecord):
        return harness_error_record(
            job,
            active.started_at,
            f"the driver returned {type(result).__name__}, not a RunRecord",
        )
    if result.key != job_key(job) or result.run_id != job.run_id:
        return harness_error_record(
            job,
            active.started_at,
            f"the driver returned a record for another run ({result.run_id})",
        )
    if timed_out and result.outcome != "harness_error":
        notes = [
            *result.notes,
            f"the harness cancelled the run at run_timeout_s={timeout_s:g}s; "
            f"the driver then reported '{result.outcome}'",
        ]
        return result.model_copy(update={"outcome": "timed_out", "notes": notes})
    return result


@dataclass(frozen=True)
class StageOptions:
    """How `run_stage` runs a stage: everything but the matrix, the stage, the driver,
    the results directory and the cancel event.

    `progress`: a tqdm bar when stderr is a terminal (plain lines every
    `progress_every` runs otherwise, or with `progress=False`); `quiet`: neither.
    `driver_identity`, `matrix_source`, `resume_hint` and `provenance` go into
    stage.json (the hint is the command that continues the stage, shown when it must
    be resumed; provenance None: the harness's version and commit only).
    `order` reorders the runs still to do (cluster stages run them in
    configuration blocks, see `stages.cluster_plan.block_order`); the default keeps the
    interleaved plan order.
    """

    resume: bool = False
    concurrency: int | None = None  # None: the matrix's
    progress: bool = True
    progress_every: int | None = None
    quiet: bool = False
    cancel_grace_s: float = DEFAULT_CANCEL_GRACE_S
    driver_identity: Mapping[str, Any] = field(default_factory=dict)
    matrix_source: str = DEFAULT_MATRIX_SOURCE
    resume_hint: str | None = None
    order: Callable[[list[RunJob]], list[RunJob]] | None = None
    provenance: Provenance | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1 (got {self.concurrency})")


class StageOptionFields(TypedDict, total=False):
    """The fields of StageOptions, as keywords of `run_stage` (see there)."""

    resume: bool
    concurrency: int | None
    progress: bool
    progress_every: int | None
    quiet: bool
    cancel_grace_s: float
    driver_identity: Mapping[str, Any]
    matrix_source: str
    resume_hint: str | None
    order: Callable[[list[RunJob]], list[RunJob]] | None
    provenance: Provenance | None


def run_stage(
    matrix: Matrix,
    stage: str,
    driver: Driver,
    out_dir: Path,
    options: StageOptions | None = None,
    *,
    cancel: threading.Event | None = None,
    **fields: Unpack[StageOptionFields],
) -> StageResult:
    """Run every planned job of `stage` not yet recorded in `out_dir`; see the module doc.

    `options` says how; keywords named after its fields override them (a
    shorthand: `run_stage(m, "sim", d, out, resume=True)`). `cancel` stops the
    stage (the CLI sets it on SIGINT/SIGTERM). The directory is held for this
    process while the stage runs (results_dir.hold_results_dir).

    Raises ResultsDirError when the directory cannot be used as asked (another
    process writes it: ResultsDirLocked; records there and no `resume`, records
    of another matrix/stage/driver, a records file with a bad line); never
    because a run went wrong. Raises StageAbort when a driver raised it (after
    the running runs stopped).
    """
    opts = dataclasses.replace(options or StageOptions(), **fields)
    with hold_results_dir(out_dir, command=opts.resume_hint):
        return _run_held(matrix, stage, driver, out_dir, opts, cancel or threading.Event())


def _run_held(
    matrix: Matrix,
    stage: str,
    driver: Driver,
    out_dir: Path,
    opts: StageOptions,
    cancel: threading.Event,
) -> StageResult:
    t0 = time.monotonic()
    workers = opts.concurrency if opts.concurrency is not None else matrix.concurrency
    setup = StageSetup(
        matrix=matrix,
        stage=stage,
        driver=dict(opts.driver_identity),
        matrix_source=opts.matrix_source,
        resume_command=opts.resume_hint,
        provenance=opts.provenance,
    )
    prepare_results_dir(out_dir, setup, resume=opts.resume)
    plan = plan_jobs(matrix, stage, out_dir)
    planned_keys = {job_key(j) for j in plan}

    log = RecordLog(StageDir(out_dir).records_file)
    try:
        existing = log.open()
    except RecordError as exc:
        raise ResultsDirError(f"cannot resume: {exc}") from None
    seen: set[RunKey] = set()
    for rec in existing:
        if rec.key not in planned_keys:
            raise ResultsDirError(
                f"{log.path}: record {rec.run_id} is not a run of this plan "
                f"({rec.stage}/{rec.config}/{rec.recipe}/{rec.input} r{rec.repetition}); "
                f"pass another --out directory"
            )
        if rec.key in seen:
            raise ResultsDirError(
                f"{log.path}: two records for the same run ({rec.run_id}); the harness "
                f"never writes that, so the file was edited: fix it or pass another --out"
            )
        seen.add(rec.key)
    todo = [j for j in plan if job_key(j) not in seen]
    if opts.order is not None:
        reordered = opts.order(todo)
        if sorted(j.run_id for j in reordered) != sorted(j.run_id for j in todo):
            raise ValueError("order() must return the same runs it was given")
        todo = reordered
    pending = deque(todo)
    abort: StageAbort | None = None

    prog = Progress(
        total=len(plan),
        initial=len(seen),
        label=stage,
        bar=opts.progress,
        every=opts.progress_every,
        quiet=opts.quiet,
    )
    if log.repaired_from is not None:
        prog.message(
            f"note: the last line of {log.path} was cut short by an interruption; "
            f"it was moved aside to {log.repaired_from} and that run will run again"
        )
    if seen and pending:
        prog.message(f"resuming: {len(seen)} runs already recorded, {len(pending)} to go")

    # (run_id, what the driver returned or raised, was its cancel event set by then)
    results: queue.Queue[tuple[str, RunRecord | BaseException, bool]] = queue.Queue()
    active: dict[str, _Active] = {}
    abandoned: list[str] = []
    recorded_now = 0
    discarded = 0
    stop_at: float | None = None
    timeout_s = matrix.run_timeout_s

    def worker(job: RunJob, job_cancel: threading.Event) -> None:
        try:
            outcome: RunRecord | BaseException = driver.run(job, job_cancel)
        except BaseException as exc:
            outcome = exc
        results.put((job.run_id, outcome, job_cancel.is_set()))

    def record(rec: RunRecord, job: RunJob) -> None:
        nonlocal recorded_now
        log.append(rec)
        recorded_now += 1
        prog.finished(cell_label(job), rec.outcome)

    try:
        while pending or active:
            now = time.monotonic()
            if (cancel.is_set() or abort is not None) and stop_at is None:
                stop_at = now
                pending.clear()
                for a in active.values():
                    if a.reason is None:
                        a.reason = "stop"
                        a.cancelled_at = now
                    a.cancel.set()
            if stop_at is not None and (now - stop_at >= opts.cancel_grace_s or _forced(cancel)):
                break
            while stop_at is None and pending and len(active) < workers:
                job = pending.popleft()
                job_cancel = threading.Event()
                active[job.run_id] = _Active(
                    job=job,
                    cancel=job_cancel,
                    started_at=now_rfc3339(),
                    deadline=time.monotonic() + timeout_s,
                )
                prog.started(cell_label(job))
                threading.Thread(
                    target=worker,
                    args=(job, job_cancel),
                    name=f"run-{job.run_id}",
                    daemon=True,  # a driver stuck past its grace must not block exit
                ).start()
            try:
                run_id, result, cancelled = results.get(timeout=_POLL_S)
            except queue.Empty:
                pass
            else:
                done = active.pop(run_id, None)
                if done is None:
                    pass  # a late return of an abandoned run: it is already recorded
                elif isinstance(result, StageAbort):
                    abort = abort or result  # not recorded: it never ran
                elif cancelled and done.reason == "stop":
                    discarded += 1  # cut short by the interruption: --resume reruns it
                else:
                    settled = _settle(done, result, cancelled=cancelled, timeout_s=timeout_s)
                    record(settled, done.job)
            now = time.monotonic()
            for run_id, a in list(active.items()):
                if a.reason is None and now >= a.deadline:
                    a.reason = "timeout"
                    a.cancelled_at = now
                    a.cancel.set()
                elif a.reason == "timeout" and now - a.cancelled_at >= opts.cancel_grace_s:
                    del active[run_id]
                    abandoned.append(run_id)
                    record(
                        harness_error_record(
                            a.job,
                            a.started_at,
                            f"no outcome observed: the run passed run_timeout_s={timeout_s:g}s, "
                            f"the harness cancelled it, and the driver did not stop within "
                            f"{opts.cancel_grace_s:g}s",
                        ),
                        a.job,
                    )
    finally:
        for a in active.values():  # only left on an interruption (or an exception here)
            a.cancel.set()
            abandoned.append(a.job.run_id)
        prog.close()

    if abort is not None:
        raise abort
    records = list(log.open())
    return StageResult(
        stage=stage,
        out_dir=out_dir,
        records_path=log.path,
        planned=len(plan),
        already_recorded=len(seen),
        recorded_now=recorded_now,
        records=records,
        interrupted=stop_at is not None,
        wall_s=time.monotonic() - t0,
        abandoned=abandoned,
        discarded=discarded + (len(active) if stop_at is not None else 0),
        repaired_from=log.repaired_from,
    )


class StopRequest(threading.Event):
    """A cancel event that also knows whether the user insisted (a second signal).

    The first request stops the stage gracefully (running runs get
    `cancel_grace_s` to stop); a second one ends the wait at once.
    """

    def __init__(self) -> None:
        super().__init__()
        self.forced = threading.Event()
        self.signal_name: str | None = None

    def request(self, signal_name: str | None = None) -> None:
        if self.is_set():
            self.forced.set()
        else:
            self.signal_name = signal_name
            self.set()


def _forced(cancel: threading.Event) -> bool:
    return isinstance(cancel, StopRequest) and cancel.forced.is_set()


@contextlib.contextmanager
def stop_on_signals(stop: StopRequest) -> Iterator[StopRequest]:
    """Turn SIGINT/SIGTERM into stop requests while the block runs (main thread only)."""
    import signal

    def handler(signum: int, _frame: object) -> None:
        stop.request(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
