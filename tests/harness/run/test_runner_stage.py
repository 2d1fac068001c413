"""The runner against the Driver protocol: plan, interleaving, bounded concurrency,
timeouts, driver exceptions, interruption, resume and the results-dir refusals.

These tests drive `run_stage` with `ScriptedTestDriver`, a small real driver
whose behaviour per run is scripted (succeed, raise, hang until cancelled,
ignore cancellation, ...). The simulator cannot be told to misbehave in those
ways, and the runner's contract (what it records when a driver is slow,
stuck or broken) is about exactly those cases. The end-to-end tests
(test_runner_kill.py, test_cli_harness_*.py) use the real SimDriver.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from spillover_harness.drivers.base import RunJob
from spillover_harness.plan.matrix import Matrix, load_matrix
from spillover_harness.results.records import (
    RunKey,
    RunRecord,
    now_rfc3339,
    read_records,
    run_id_for,
)
from spillover_harness.results.results_dir import ResultsDirError
from spillover_harness.run.runner import (
    StopRequest,
    job_key,
    plan_jobs,
    run_stage,
    seed_for,
    stop_on_signals,
)

MATRIX = """\
name: runner-test
seed: {seed}
configurations:
  - name: "off"
    env: {{CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}}
  - name: 128KiB
  - name: 32KiB
    env: {{CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"}}
recipes:
  - name: code-review
    inputs:
      - {{name: small, size_class: small}}
      - {{name: large, size_class: large}}
  - name: summarize
    inputs: [{{name: document, size_class: medium}}]
repetitions: {{sim: {reps}, minikube: 1, dev: 1}}
run_timeout_s: {timeout}
concurrency: {concurrency}
acceptance: {{baseline: "off", token_tolerance: 0.1, quality_recipes: [summarize]}}
decision:
  chain:
    - {{config: 128KiB, default: "131072"}}
    - {{config: 32KiB, default: "32768"}}
  fallback: "false"
"""


def make_matrix(
    tmp_path: Path, *, reps: int = 2, timeout: float = 30, concurrency: int = 2, seed: int = 11
) -> Matrix:
    path = tmp_path / f"matrix-{seed}-{reps}-{timeout}-{concurrency}.yaml"
    path.write_text(
        MATRIX.format(seed=seed, reps=reps, timeout=timeout, concurrency=concurrency),
        encoding="utf-8",
    )
    return load_matrix(path)


Behaviour = Callable[[RunJob, threading.Event], str]


class ScriptedTestDriver:
    """A real Driver whose behaviour per run is scripted by the test.

    `script(job)` returns one of:
      - "succeed": return a `succeeded` record after `delay_s`;
      - "raise": raise RuntimeError (a driver bug);
      - "hang": wait until cancelled, then return `aborted` (a well-behaved driver);
      - "stuck": ignore cancellation and block until `release` is set;
      - "wrong-record": return a record for another run.
    It counts the runs in flight, so tests can check the concurrency bound.
    """

    def __init__(
        self,
        script: Callable[[RunJob], str] | None = None,
        *,
        delay_s: float = 0.0,
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        self.script = script or (lambda job: "succeed")
        self.delay_s = delay_s
        self.on_finish = on_finish
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.started: list[str] = []
        self.finished = 0

    def run(self, job: RunJob, cancel: threading.Event) -> RunRecord:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.started.append(job.run_id)
        started_at = now_rfc3339()
        try:
            action = self.script(job)
            outcome = "succeeded"
            run_id = job.run_id
            if action == "raise":
                raise RuntimeError("scripted driver failure")
            if action == "hang":
                cancel.wait(60)
                outcome = "aborted"
            elif action == "stuck":
                self.release.wait(60)
            elif action == "wrong-record":
                run_id = "someone-else"
            elif self.delay_s:
                cancel.wait(self.delay_s)
            return RunRecord.model_validate(
                {
                    "run_id": run_id,
                    "stage": job.stage,
                    "config": job.config.name,
                    "recipe": job.recipe,
                    "input": job.input.name,
                    "size_class": job.input.size_class,
                    "repetition": job.repetition,
                    "outcome": outcome,
                    "iterations": 3,
                    "input_tokens": 1000 + job.seed % 100,
                    "started_at": started_at,
                    "finished_at": now_rfc3339(),
                    "notes": [f"scripted: {action}"],
                }
            )
        finally:
            with self._lock:
                self.in_flight -= 1
                self.finished += 1
                n = self.finished
            if self.on_finish is not None:
                self.on_finish(n)


def keys(records: list[RunRecord]) -> list[RunKey]:
    return [r.key for r in records]


def plan_keys(matrix: Matrix, stage: str = "sim") -> set[RunKey]:
    return {job_key(j) for j in plan_jobs(matrix, stage, Path("/unused"))}


# ---------------------------------------------------------------------------------- the plan


def test_plan_covers_the_stage_exactly_once(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=3)
    jobs = plan_jobs(matrix, "sim", tmp_path)
    assert len(jobs) == 3 * 3 * 3  # configs x cells x reps
    assert len({job_key(j) for j in jobs}) == len(jobs)
    assert len({j.run_id for j in jobs}) == len(jobs)
    assert len(plan_jobs(matrix, "minikube", tmp_path)) == 3 * 3 * 1
    assert all(j.timeout_s == 30 and j.out_dir == tmp_path for j in jobs)


def test_run_ids_are_readable_stable_and_unique(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path)
    first = [j.run_id for j in plan_jobs(matrix, "sim", tmp_path)]
    again = [j.run_id for j in plan_jobs(make_matrix(tmp_path), "sim", tmp_path / "x")]
    assert first == again
    assert first[0].startswith("sim-off-code-review-small-r1-")
    # names that only differ in characters the readable part drops stay distinct
    a = run_id_for(RunKey("sim", "a b", "r", "i", 1))
    b = run_id_for(RunKey("sim", "a_b", "r", "i", 1))
    assert a != b and a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0]


def test_seeds_depend_on_cell_and_repetition_not_configuration(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=2)
    jobs = plan_jobs(matrix, "sim", tmp_path)
    by_cell_rep: dict[tuple[str, str, int], set[int]] = {}
    for j in jobs:
        by_cell_rep.setdefault((j.recipe, j.input.name, j.repetition), set()).add(j.seed)
    assert all(len(s) == 1 for s in by_cell_rep.values())  # same seed across configs
    assert len({next(iter(s)) for s in by_cell_rep.values()}) == len(by_cell_rep)
    other = make_matrix(tmp_path, seed=12)
    assert seed_for(matrix, "summarize", "document", 1) != seed_for(
        other, "summarize", "document", 1
    )


def test_plan_interleaves_configurations(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=2)
    configs = [j.config.name for j in plan_jobs(matrix, "sim", tmp_path)]
    n = 3
    # every window of one cell holds every configuration once
    for start in range(0, len(configs), n):
        assert sorted(configs[start : start + n]) == ["128KiB", "32KiB", "off"]
    # and no configuration always goes first
    firsts = {configs[i] for i in range(0, len(configs), n)}
    assert firsts == {"off", "128KiB", "32KiB"}


def test_records_come_interleaved(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=2)
    run_stage(
        matrix,
        "sim",
        ScriptedTestDriver(),
        tmp_path / "out",
        resume=False,
        concurrency=1,
        progress=False,
    )
    configs = [r.config for r in read_records(tmp_path / "out" / "runs.jsonl")]
    assert len(set(configs[:3])) == 3, configs[:6]
    # `off` is never all done before the others: its last run comes after their first
    last_off = max(i for i, c in enumerate(configs) if c == "off")
    assert last_off > min(i for i, c in enumerate(configs) if c != "off")
    assert last_off > len(configs) // 2


# ---------------------------------------------------------------------------------- running


def test_full_stage_records_every_planned_run_once(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=2)
    result = run_stage(
        matrix, "sim", ScriptedTestDriver(), tmp_path / "out", resume=False, progress=False
    )
    assert not result.interrupted
    assert result.planned == 18 and result.recorded_now == 18 and result.missing == 0
    on_disk = read_records(tmp_path / "out" / "runs.jsonl")
    assert set(keys(on_disk)) == plan_keys(matrix) and len(on_disk) == 18
    assert on_disk == result.records
    stage = json.loads((tmp_path / "out" / "stage.json").read_text())
    assert stage["stage"] == "sim" and stage["matrix_name"] == "runner-test"
    assert stage["matrix_hash"].startswith("sha256:")


def test_concurrency_is_bounded(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=2, concurrency=8)
    driver = ScriptedTestDriver(delay_s=0.03)
    run_stage(matrix, "sim", driver, tmp_path / "out", resume=False, concurrency=3, progress=False)
    assert driver.max_in_flight == 3  # reached, never passed
    driver2 = ScriptedTestDriver(delay_s=0.03)
    run_stage(matrix, "sim", driver2, tmp_path / "out2", resume=False, progress=False)
    assert driver2.max_in_flight == 8  # the matrix's own value when not overridden


def test_a_driver_exception_becomes_a_harness_error_record(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)

    def script(job: RunJob) -> str:
        return "raise" if job.config.name == "32KiB" and job.recipe == "summarize" else "succeed"

    result = run_stage(
        matrix, "sim", ScriptedTestDriver(script), tmp_path / "out", resume=False, progress=False
    )
    assert not result.interrupted and result.missing == 0
    errors = [r for r in result.records if r.outcome == "harness_error"]
    assert len(errors) == 1
    err = errors[0]
    assert (err.config, err.recipe, err.size_class) == ("32KiB", "summarize", "medium")
    assert err.notes == ["the driver raised RuntimeError: scripted driver failure"]
    assert err.input_tokens is None and err.iterations is None  # not measured, never zero


def test_a_wrong_record_becomes_a_harness_error(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)

    def script(job: RunJob) -> str:
        return "wrong-record" if job.config.name == "off" else "succeed"

    result = run_stage(
        matrix, "sim", ScriptedTestDriver(script), tmp_path / "out", resume=False, progress=False
    )
    bad = [r for r in result.records if r.outcome == "harness_error"]
    assert len(bad) == 3 and all("another run" in r.notes[0] for r in bad)
    assert set(keys(result.records)) == plan_keys(matrix)


def test_timeout_with_a_driver_that_stops_is_timed_out(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1, timeout=0.2)

    def script(job: RunJob) -> str:
        return "hang" if job.input.name == "large" else "succeed"

    result = run_stage(
        matrix, "sim", ScriptedTestDriver(script), tmp_path / "out", resume=False, progress=False
    )
    timed = [r for r in result.records if r.outcome == "timed_out"]
    assert {r.config for r in timed} == {"off", "128KiB", "32KiB"}
    assert all(r.input == "large" for r in timed)
    assert all("cancelled the run at run_timeout_s=0.2s" in r.notes[-1] for r in timed)
    assert all("'aborted'" in r.notes[-1] for r in timed)
    assert Counter(r.outcome for r in result.records)["succeeded"] == 6


def test_timeout_with_a_driver_that_never_returns_is_harness_error(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1, timeout=0.2)

    def script(job: RunJob) -> str:
        return "stuck" if (job.config.name, job.input.name) == ("128KiB", "large") else "succeed"

    driver = ScriptedTestDriver(script)
    try:
        result = run_stage(
            matrix,
            "sim",
            driver,
            tmp_path / "out",
            resume=False,
            progress=False,
            cancel_grace_s=0.2,
        )
    finally:
        driver.release.set()  # let the abandoned thread end
    stuck = [r for r in result.records if r.outcome == "harness_error"]
    assert len(stuck) == 1 and stuck[0].config == "128KiB"
    assert "did not stop within 0.2s" in stuck[0].notes[0]
    assert result.abandoned == [stuck[0].run_id]
    assert set(keys(result.records)) == plan_keys(matrix) and len(result.records) == 9
    time.sleep(0.1)  # the late return is ignored: still one record per run
    assert len(read_records(tmp_path / "out" / "runs.jsonl")) == 9


# ------------------------------------------------------------------ interruption and resume


def test_cancel_keeps_finished_records_and_resume_completes_exactly(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=3)
    out = tmp_path / "out"
    stop = StopRequest()

    def on_finish(n: int) -> None:
        if n == 5:
            stop.request("SIGINT")

    first = ScriptedTestDriver(delay_s=0.02, on_finish=on_finish)
    result = run_stage(
        matrix, "sim", first, out, resume=False, concurrency=2, progress=False, cancel=stop
    )
    assert result.interrupted
    kept = read_records(out / "runs.jsonl")  # a valid file
    assert 4 <= len(kept) <= 6 < result.planned
    assert len(set(keys(kept))) == len(kept)
    assert all(r.outcome == "succeeded" for r in kept)  # no run cut short was recorded

    second = ScriptedTestDriver()
    resumed = run_stage(matrix, "sim", second, out, resume=True, progress=False)
    assert not resumed.interrupted and resumed.already_recorded == len(kept)
    final = read_records(out / "runs.jsonl")
    assert len(final) == result.planned
    assert set(keys(final)) == plan_keys(matrix)
    assert final[: len(kept)] == kept  # nothing rewritten
    assert len(second.started) == result.planned - len(kept)  # nothing ran twice


def test_runs_cut_short_by_a_stop_are_not_recorded(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    stop = StopRequest()
    started = threading.Event()

    def script(job: RunJob) -> str:
        started.set()
        return "hang"

    driver = ScriptedTestDriver(script)
    threading.Timer(0.2, lambda: stop.request("SIGTERM")).start()
    result = run_stage(
        matrix, "sim", driver, tmp_path / "out", resume=False, progress=False, cancel=stop
    )
    assert started.is_set() and result.interrupted
    assert result.records == [] and result.discarded == 2
    assert (tmp_path / "out" / "runs.jsonl").read_text() == ""


def test_resume_of_a_complete_stage_runs_nothing(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=False, progress=False)
    driver = ScriptedTestDriver()
    result = run_stage(matrix, "sim", driver, out, resume=True, progress=False)
    assert driver.started == [] and result.recorded_now == 0 and len(result.records) == 9


def test_resume_repairs_a_torn_last_line(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    stop = StopRequest()
    first = ScriptedTestDriver(on_finish=lambda n: stop.request() if n == 3 else None)
    run_stage(matrix, "sim", first, out, resume=False, concurrency=1, progress=False, cancel=stop)
    kept = read_records(out / "runs.jsonl")
    with (out / "runs.jsonl").open("a") as handle:
        handle.write('{"schema": 1, "run_id": "sim-32KiB-summ')  # a write cut by a kill
    result = run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=True, progress=False)
    assert result.repaired_from == out / "runs.jsonl.torn-1"
    assert result.repaired_from.read_text().startswith('{"schema": 1')
    final = read_records(out / "runs.jsonl")
    assert final[: len(kept)] == kept
    assert len(final) == 9 and set(keys(final)) == plan_keys(matrix)


def test_records_present_without_resume_are_refused(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=False, progress=False)
    before = (out / "runs.jsonl").read_bytes()
    with pytest.raises(ResultsDirError) as info:
        run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=False, progress=False)
    assert "already holds run records" in str(info.value)
    assert "--resume" in str(info.value) and "another --out" in str(info.value)
    assert (out / "runs.jsonl").read_bytes() == before


def test_resume_with_another_matrix_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_stage(
        make_matrix(tmp_path, reps=1),
        "sim",
        ScriptedTestDriver(),
        out,
        resume=False,
        progress=False,
        matrix_source="first.yaml",
    )
    before = (out / "runs.jsonl").read_bytes()
    other = make_matrix(tmp_path, reps=1, seed=99)
    with pytest.raises(ResultsDirError) as info:
        run_stage(other, "sim", ScriptedTestDriver(), out, resume=True, progress=False)
    message = str(info.value)
    assert "refusing to resume" in message and "made with another matrix" in message
    assert "  - matrix seed: 11 -> 99" in message.splitlines()  # what changed, not two hashes
    assert "sha256" not in message
    assert f"spillover-harness run --stage sim --matrix first.yaml --out {out} --resume" in message
    assert "another --out" in message
    assert (out / "runs.jsonl").read_bytes() == before


def test_resume_with_another_driver_setup_is_refused(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    run_stage(
        matrix,
        "sim",
        ScriptedTestDriver(),
        out,
        resume=False,
        progress=False,
        driver_identity={"kind": "sim", "faults": []},
    )
    with pytest.raises(ResultsDirError) as info:
        run_stage(
            matrix,
            "sim",
            ScriptedTestDriver(),
            out,
            resume=True,
            progress=False,
            driver_identity={"kind": "sim", "faults": ["spill-to-disk"]},
        )
    message = str(info.value)
    assert "made with other fault switches" in message  # not "different matrices"
    assert "  - fault switches: none -> spill-to-disk" in message.splitlines()
    assert "matri" not in message.split("Mixing")[0]


def test_concurrency_is_not_part_of_the_identity(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stop = StopRequest()
    first = ScriptedTestDriver(on_finish=lambda n: stop.request() if n == 2 else None)
    run_stage(
        make_matrix(tmp_path, reps=1, concurrency=1),
        "sim",
        first,
        out,
        resume=False,
        progress=False,
        cancel=stop,
    )
    result = run_stage(
        make_matrix(tmp_path, reps=1, concurrency=4),
        "sim",
        ScriptedTestDriver(),
        out,
        resume=True,
        progress=False,
    )
    assert len(result.records) == 9


def test_records_without_stage_file_are_refused(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=False, progress=False)
    (out / "stage.json").unlink()
    with pytest.raises(ResultsDirError, match=r"stage\.json is missing"):
        run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=True, progress=False)


def test_a_duplicated_record_is_refused_on_resume(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=False, progress=False)
    first_line = (out / "runs.jsonl").read_text().splitlines()[0]
    with (out / "runs.jsonl").open("a") as handle:
        handle.write(first_line + "\n")
    with pytest.raises(ResultsDirError, match="two records for the same run"):
        run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=True, progress=False)


def test_a_bad_line_in_the_results_dir_is_named(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=False, progress=False)
    with (out / "runs.jsonl").open("a") as handle:
        handle.write("[1, 2]\n")
    with pytest.raises(ResultsDirError, match=r"runs.jsonl:10: a record must be a JSON object"):
        run_stage(matrix, "sim", ScriptedTestDriver(), out, resume=True, progress=False)


def test_plain_progress_lines_when_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    run_stage(
        matrix,
        "sim",
        ScriptedTestDriver(),
        tmp_path / "out",
        resume=False,
        progress=True,
        progress_every=4,
    )
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[sim]")]
    assert [ln.split(" runs")[0] for ln in lines] == ["[sim] 4/9", "[sim] 8/9", "[sim] 9/9"]
    assert "eta" in lines[0] and "last: " in lines[0]


def test_a_second_stop_request_ends_the_wait_at_once(tmp_path: Path) -> None:
    matrix = make_matrix(tmp_path, reps=1)
    stop = StopRequest()
    driver = ScriptedTestDriver(lambda job: "stuck")

    def insist() -> None:
        stop.request("SIGINT")
        time.sleep(0.2)
        stop.request("SIGINT")

    threading.Timer(0.2, insist).start()
    t0 = time.monotonic()
    try:
        result = run_stage(
            matrix,
            "sim",
            driver,
            tmp_path / "out",
            resume=False,
            progress=False,
            cancel=stop,
            cancel_grace_s=60,
        )
    finally:
        driver.release.set()
    assert time.monotonic() - t0 < 10
    assert result.interrupted and stop.forced.is_set() and stop.signal_name == "SIGINT"
    assert result.records == [] and result.discarded == 2


def test_signals_become_stop_requests(tmp_path: Path) -> None:
    import os
    import signal

    matrix = make_matrix(tmp_path, reps=1)
    stop = StopRequest()

    def script(job: RunJob) -> str:
        if job.config.name == "128KiB":
            os.kill(os.getpid(), signal.SIGTERM)
        return "succeed"

    with stop_on_signals(stop):
        result = run_stage(
            matrix,
            "sim",
            ScriptedTestDriver(script),
            tmp_path / "out",
            resume=False,
            concurrency=1,
            progress=False,
            cancel=stop,
        )
    assert stop.signal_name == "SIGTERM" and result.interrupted
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    assert 1 <= len(result.records) < 9
