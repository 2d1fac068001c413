"""The simulator served over HTTP: what cluster-mode tests and a real Prometheus talk to.

Contract (docs/simulator.md has the details and examples):

- `POST /runs` `{"recipe", "input", "env": {VAR: value}, "seed", "run_id",
  "repetition"?: 1, "timeout_s"?: null, "pace"?: server default}` -> 202
  `{"run_id"}`; 400 for a bad body, 409 for a run_id already used. `seed` seeds
  the scripted agent; the inputs are the server's fixtures (built from
  `--fixture-seed`, default: the default matrix's seed), the same for every run.
- `GET /runs` -> `{"runs": [run_id, ...]}`.
- `GET /runs/{id}` -> 200 status JSON: `runId, recipe, input, phase (Pending,
  Running, Succeeded, Failed, Aborted, TimedOut, Error), outcome (null until the
  end; then succeeded/failed/aborted/timed_out), iterations, hitIterationLimit,
  tokensUsed {input, output}, toolsCalled, durationSeconds, statusReportBytes,
  spilloverPersisted, spilloverReads, outputDir, error`; 404 if unknown.
- `GET /runs/{id}/logs` -> the step's log lines so far (JSON Lines, text/plain).
- `POST /runs/{id}/cancel` -> 202; the run ends `aborted`.
- `GET /metrics` -> Prometheus text: `clerum_workflow_step_spillover_persisted_total
  {tool}` and `clerum_workflow_step_spillover_reads_total{with_range}`, summed
  over every run of this server (one registry per server), and the first-party
  `clerum_spillover_persisted_total` / `clerum_spillover_reads_total` (which
  workflow runs move only with the `feed_first_party` fault).
- With `env_source`, a run's environment is the recipe's mcp-host pod's (the
  callable's answer), not the request's `env`.
- `POST /admin/restart` -> 200: the counters restart at zero (an mcp-host
  restart, a counter reset for Prometheus). Runs in flight keep running.
- `GET /healthz` -> 200 `ok`.
- `GET /spillover` -> `{"runsWith": {VAR: value or null}, "source": ...}`: the raw values
  of the three variables this server runs its steps with (null: unset, the default).
  With `process_env` (`--env-from-process`: the simulator serving as an mcp-host in a
  pod), every run's environment is this process's own, whatever the request says, and
  this is what it reports; with the `ignore_env` fault it runs (and reports) defaults.

`serve(host, port)` starts one in a daemon thread; `python -m
spillover_harness.sim.server --port N` runs one in the foreground.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, cast

from prometheus_client import CONTENT_TYPE_LATEST
from spillover_operator.domain.model import SPILLOVER_VARS

from spillover_harness.fixtures import FixtureSet, fixtures_for
from spillover_harness.sim.metrics import SpilloverMetrics
from spillover_harness.sim.step import run_step
from spillover_harness.sim.steprun import SimFaults, StepLimits, StepRun

PHASES = {
    "succeeded": "Succeeded",
    "failed": "Failed",
    "aborted": "Aborted",
    "timed_out": "TimedOut",
}
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_MAX_BODY = 1 << 20


@dataclass
class _RunState:
    run_id: str
    recipe: str
    input: str
    run_dir: Path
    cancel: threading.Event = field(default_factory=threading.Event)
    phase: str = "Pending"
    result: StepRun | None = None
    error: str | None = None
    wall_s: float | None = None  # real seconds the run took here (for benchmarks)

    @property
    def output_dir(self) -> Path:
        return self.run_dir / "output"

    @property
    def logs_path(self) -> Path:
        return self.run_dir / "logs.jsonl"

    def status(self) -> dict[str, Any]:
        r = self.result
        return {
            "runId": self.run_id,
            "recipe": self.recipe,
            "input": self.input,
            "phase": self.phase,
            "outcome": r.outcome if r else None,
            "iterations": r.iterations if r else None,
            "hitIterationLimit": r.hit_iteration_limit if r else None,
            "tokensUsed": {
                "input": r.input_tokens if r else None,
                "output": r.output_tokens if r else None,
            },
            "toolsCalled": r.tools_called if r else None,
            "durationSeconds": r.duration_s if r else None,
            "statusReportBytes": len(r.status_report) if r else None,
            "spilloverPersisted": r.persisted if r else None,
            "spilloverReads": r.reads if r else None,
            "outputDir": str(self.output_dir),
            "error": self.error if self.error else (r.error if r else None),
        }


class _Tee:
    """Writes each whole line to a run's log file and to a shared stream (one lock for
    the shared stream, so that concurrent runs never interleave inside a line)."""

    _shared_lock = threading.Lock()

    def __init__(self, file: IO[str], shared: IO[str]) -> None:
        self.file, self.shared = file, shared

    def write(self, text: str) -> int:
        self.file.write(text)
        with self._shared_lock:
            self.shared.write(text)
        return len(text)

    def flush(self) -> None:
        self.file.flush()
        with self._shared_lock:
            self.shared.flush()


class BadRequestError(ValueError):
    pass


class SimServer(ThreadingHTTPServer):
    """A simulated mcp-host + workflow platform behind a small HTTP API."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        out_dir: Path | None = None,
        fixtures: FixtureSet | None = None,
        fixture_seed: int | None = None,
        faults: SimFaults = SimFaults(),  # noqa: B008 (frozen, immutable)
        limits: StepLimits | None = None,
        pace: float = 0.0,
        workers: int = 4,
        env_source: Callable[[str], Mapping[str, str]] | None = None,
        process_env: bool = False,
        log_to: IO[str] | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if out_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="spillover-sim-")
            out_dir = Path(self._tmp.name)
        self.out_dir = Path(out_dir)
        self.faults = faults
        self.limits = limits if limits is not None else StepLimits()
        self.pace = pace
        # Where a run's mcp-host environment comes from: the recipe's mcp-host pod (a
        # callable given the recipe), as on the platform; None: the request's `env`.
        self.env_source = env_source
        self.process_env = process_env
        # Where step log lines also go as they are written (`--log-stdout`: the
        # container's stdout, so that `kubectl logs` shows them as an mcp-host's would).
        self.log_to = log_to
        self.metrics = SpilloverMetrics()
        self.restarts = 0
        self._fixtures = fixtures
        self._fixture_seed = fixture_seed
        self._runs: dict[str, _RunState] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sim-run")

    @property
    def url(self) -> str:
        host, port = self.server_address[0], self.server_address[1]
        return f"http://{host!s}:{port}"

    # -- runs ------------------------------------------------------------------------

    @property
    def fixtures(self) -> FixtureSet:
        with self._lock:
            if self._fixtures is None:
                self._fixtures = fixtures_for(self._fixture_seed)
            return self._fixtures

    def start_run(self, body: Any) -> str:
        if not isinstance(body, dict):
            raise BadRequestError("the body must be a JSON object")
        unknown = sorted(
            set(body)
            - {"recipe", "input", "env", "seed", "run_id", "repetition", "timeout_s", "pace"}
        )
        if unknown:
            raise BadRequestError(f"unknown fields: {', '.join(unknown)}")
        recipe, input_name, run_id = body.get("recipe"), body.get("input"), body.get("run_id")
        env = body.get("env", {})
        seed, repetition = body.get("seed"), body.get("repetition", 1)
        timeout_s, pace = body.get("timeout_s"), body.get("pace", self.pace)
        if not isinstance(recipe, str) or not isinstance(input_name, str):
            raise BadRequestError("'recipe' and 'input' must be strings")
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            raise BadRequestError("'run_id' must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}")
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise BadRequestError("'env' must map variable names to string values")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise BadRequestError("'seed' must be an integer")
        if not isinstance(repetition, int) or isinstance(repetition, bool) or repetition < 1:
            raise BadRequestError("'repetition' must be an integer >= 1")
        if timeout_s is not None and (
            not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool) or timeout_s <= 0
        ):
            raise BadRequestError("'timeout_s' must be a positive number or null")
        if not isinstance(pace, int | float) or isinstance(pace, bool) or pace < 0:
            raise BadRequestError("'pace' must be a number >= 0")
        try:
            fixture = self.fixtures.get(recipe, input_name)
        except KeyError as exc:
            raise BadRequestError(str(exc.args[0])) from None
        with self._lock:
            if run_id in self._runs:
                raise FileExistsError(run_id)
            state = _RunState(run_id, recipe, input_name, self.out_dir / "runs" / run_id)
            self._runs[run_id] = state
        limits = StepLimits(
            self.limits.max_iterations,
            self.limits.context_window_tokens,
            float(timeout_s) if timeout_s is not None else self.limits.timeout_s,
        )

        def work() -> None:
            state.phase = "Running"
            t0 = time.monotonic()
            run_env = env
            try:
                if self.process_env:
                    run_env = {k: v for k, v in self.runs_with().items() if v is not None}
                elif self.env_source is not None:
                    run_env = dict(self.env_source(recipe))
                state.run_dir.mkdir(parents=True, exist_ok=True)
                with state.logs_path.open("w", encoding="utf-8") as file:
                    stream = file if self.log_to is None else cast(IO[str], _Tee(file, self.log_to))
                    state.result = run_step(
                        fixture=fixture,
                        env=dict(run_env),
                        seed=seed,
                        repetition=repetition,
                        run_id=run_id,
                        output_dir=state.output_dir,
                        faults=self.faults,
                        metrics=self.metrics,
                        limits=limits,
                        cancel=state.cancel,
                        log_stream=stream,
                        pace=float(pace),
                    )
                (state.run_dir / "status-report.json").write_bytes(state.result.status_report)
                state.wall_s = time.monotonic() - t0
                state.phase = PHASES.get(state.result.outcome, "Error")
            except Exception as exc:
                state.error = f"simulator error: {type(exc).__name__}: {exc}"
                state.phase = "Error"

        self._executor.submit(work)
        return run_id

    def runs_with(self) -> dict[str, str | None]:
        """The raw spillover values this server's steps run with (None: the default)."""
        if self.faults.ignore_env:
            return dict.fromkeys(SPILLOVER_VARS)
        if self.process_env:
            return {var: os.environ.get(var) for var in SPILLOVER_VARS}
        return dict.fromkeys(SPILLOVER_VARS)

    def get_run(self, run_id: str) -> _RunState | None:
        with self._lock:
            return self._runs.get(run_id)

    def run_ids(self) -> list[str]:
        with self._lock:
            return list(self._runs)

    def restart(self) -> None:
        """An mcp-host restart: the counters start again from zero."""
        self.metrics.reset()
        self.restarts += 1

    def server_close(self) -> None:
        with self._lock:
            states = list(self._runs.values())
        for state in states:
            state.cancel.set()
        self._executor.shutdown(wait=True)
        super().server_close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class _Handler(BaseHTTPRequestHandler):
    server_version = "spillover-sim/1"
    protocol_version = "HTTP/1.1"

    @property
    def sim(self) -> SimServer:
        return cast(SimServer, self.server)

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests and cluster mode read the API, not access logs

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, (json.dumps(value) + "\n").encode("utf-8"), "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise BadRequestError("body too large")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BadRequestError(f"not valid JSON: {exc.msg}") from None

    def _path(self) -> list[str]:
        return [p for p in self.path.split("?", 1)[0].split("/") if p]

    def do_GET(self) -> None:
        parts = self._path()
        if parts == ["healthz"]:
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
        elif parts == ["spillover"]:
            source = (
                "defaults (fault ignore_env)"
                if self.sim.faults.ignore_env
                else ("process environment" if self.sim.process_env else "each run's request")
            )
            self._json(HTTPStatus.OK, {"runsWith": self.sim.runs_with(), "source": source})
        elif parts == ["metrics"]:
            self._send(HTTPStatus.OK, self.sim.metrics.exposition(), CONTENT_TYPE_LATEST)
        elif parts == ["runs"]:
            self._json(HTTPStatus.OK, {"runs": self.sim.run_ids()})
        elif len(parts) in (2, 3) and parts[0] == "runs":
            state = self.sim.get_run(parts[1])
            if state is None:
                self._error(HTTPStatus.NOT_FOUND, f"no run '{parts[1]}'")
            elif len(parts) == 2:
                self._json(HTTPStatus.OK, state.status())
            elif parts[2] == "logs":
                text = ""
                if state.logs_path.exists():
                    text = state.logs_path.read_text(encoding="utf-8")
                    text = text[: text.rfind("\n") + 1]  # only whole lines
                self._send(HTTPStatus.OK, text.encode("utf-8"), "text/plain; charset=utf-8")
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no such resource: {self.path}")
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such resource: {self.path}")

    def do_POST(self) -> None:
        parts = self._path()
        try:
            body = self._body()
            if parts == ["runs"]:
                run_id = self.sim.start_run(body)
                self._json(HTTPStatus.ACCEPTED, {"run_id": run_id})
            elif len(parts) == 3 and parts[0] == "runs" and parts[2] == "cancel":
                state = self.sim.get_run(parts[1])
                if state is None:
                    self._error(HTTPStatus.NOT_FOUND, f"no run '{parts[1]}'")
                else:
                    state.cancel.set()
                    self._json(HTTPStatus.ACCEPTED, {"run_id": state.run_id})
            elif parts == ["admin", "restart"]:
                self.sim.restart()
                self._json(HTTPStatus.OK, {"restarted": True, "restarts": self.sim.restarts})
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no such resource: {self.path}")
        except BadRequestError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
        except FileExistsError as exc:
            self._error(HTTPStatus.CONFLICT, f"run_id '{exc.args[0]}' is already used")


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    **options: Any,
) -> tuple[SimServer, threading.Thread]:
    """Start a server (port 0: any free port; see `server.url`) in a daemon thread.

    Stop it with `server.shutdown(); server.server_close()`.
    """
    server = SimServer((host, port), **options)
    thread = threading.Thread(target=server.serve_forever, name="spillover-sim-http", daemon=True)
    thread.start()
    return server, thread


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spillover_harness.sim.server",
        description="Serve the spillover simulator over HTTP (see docs/simulator.md).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    parser.add_argument("--out", type=Path, default=None, help="run directories (default: temp)")
    parser.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="real seconds per simulated second (0: as fast as possible)",
    )
    parser.add_argument(
        "--fixture-seed",
        type=int,
        default=None,
        help="seed of the inputs (default: the default matrix's seed)",
    )
    parser.add_argument("--workers", type=int, default=4, help="runs executed at once")
    parser.add_argument(
        "--env-from-process",
        action="store_true",
        help="serve as an mcp-host: run every step with this process's own spillover "
        "variables (reported on GET /spillover), not the request's",
    )
    parser.add_argument(
        "--export-fixtures",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the inputs this server serves under DIR at start (as `spillover-harness "
        "fixtures export` does), where the harness's preflight checks them",
    )
    parser.add_argument(
        "--log-stdout",
        action="store_true",
        help="also print every step log line on stdout (an mcp-host in a pod logs there)",
    )
    parser.add_argument("--max-iterations", type=int, default=StepLimits().max_iterations)
    parser.add_argument(
        "--fault-write-spill", action="store_true", help="FAULT: write spills to <output>/.spill"
    )
    parser.add_argument(
        "--fault-log-results", action="store_true", help="FAULT: log tool-result content"
    )
    parser.add_argument(
        "--fault-ignore-env", action="store_true", help="FAULT: run with the defaults"
    )
    parser.add_argument(
        "--fault-default-threshold",
        type=int,
        default=None,
        help="FAULT: a drifted default threshold (bytes)",
    )
    parser.add_argument(
        "--fault-first-party",
        action="store_true",
        help="FAULT: feed the first-party counters too",
    )
    args = parser.parse_args(argv)
    server = SimServer(
        (args.host, args.port),
        out_dir=args.out,
        fixture_seed=args.fixture_seed,
        faults=SimFaults(
            args.fault_write_spill,
            args.fault_log_results,
            args.fault_ignore_env,
            args.fault_default_threshold,
            args.fault_first_party,
        ),
        limits=StepLimits(max_iterations=args.max_iterations),
        pace=args.pace,
        workers=args.workers,
        process_env=args.env_from_process,
        log_to=sys.stdout if args.log_stdout else None,
    )
    if args.export_fixtures is not None:
        from spillover_harness.fixtures import export_fixtures

        export_fixtures(server.fixtures, args.export_fixtures)
    print(f"spillover simulator listening on {server.url}", flush=True)
    # As PID 1 in a pod, SIGTERM does nothing unless handled: the kubelet would wait the
    # whole grace period and SIGKILL it, keeping a pod with old values around longer.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
