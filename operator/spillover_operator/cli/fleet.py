"""`kill`, `restore` and `status` on several clusters at once (`--context` given more
than once, or `--all-contexts`): production is several clusters, and an incident must
not mean one command per context by hand.

Each cluster runs in a thread of its own with its own connection, exactly the command
one `--context` runs (`change.cmd_change`, `status.cmd_status`); its lines go to stderr,
each prefixed with `[context]`, and stdout gets one line per cluster and a summary. The
exit code is the worst of the clusters' by `FLEET_PRECEDENCE` (docs/exit-codes.md).

Ctrl-C: a cluster whose write has not begun is never started; a cluster whose write is
in flight finishes it (one all-or-nothing write each: the kill switch first, and with
--direct the Deployment patch too) before the command ends, whatever further Ctrl-C
arrives; a wait is abandoned (the change stands). The table says which is which.
"""

from __future__ import annotations

import io
import json
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TextIO, cast

from spillover_operator import exit_codes
from spillover_operator.client import ClientError, Connection

from .errors import BadInput, exit_code

# The order in which one cluster's code becomes the fleet's: the first that any cluster
# has. Interrupted and bugs first (nothing can be trusted), then "the change was not
# made" (the cluster could not be used, no policy, bad input), then "made, but not in
# effect as asked" (refused by the operator, --wait timed out, an extra not done).
FLEET_PRECEDENCE: Final[tuple[int, ...]] = (
    exit_codes.INTERRUPTED,
    exit_codes.INTERNAL,
    exit_codes.API,
    exit_codes.NOT_FOUND,
    exit_codes.BAD_INPUT,
    exit_codes.MISMATCH,
    exit_codes.TIMEOUT,
    exit_codes.EXTRA_REFUSED,
    exit_codes.OK,
)
MAX_CONTEXTS: Final = 64
DETAIL_MAX: Final = 240

# A cluster's phase: the fleet's Ctrl-C decides from it what it may abandon.
PENDING, WRITING, WRITTEN, FINISHED = "pending", "writing", "written", "finished"


class _Stopped(BaseException):
    """Raised in a cluster's thread at the point after its write when Ctrl-C came: the
    change stands, the wait is abandoned. A BaseException: no handler of an expected
    failure may take it for one."""


def fleet_code(codes: list[int]) -> int:
    """The fleet's exit code: 0 only when every cluster's is 0."""
    for code in FLEET_PRECEDENCE:
        if code in codes:
            return code
    return max(codes, default=exit_codes.OK)


class _Prefixed(io.TextIOBase):
    """A cluster's stdout or stderr: whole lines, each prefixed with `[context]`, written
    to the shared stream under one lock, so clusters never interleave within a line."""

    def __init__(self, target: TextIO, prefix: str, lock: threading.Lock) -> None:
        self.target, self.prefix, self.lock = target, prefix, lock
        self.pending = ""
        self.lines: list[str] = []  # everything written, for the cluster's table line

    def write(self, text: str) -> int:
        self.pending += text
        *whole, self.pending = self.pending.split("\n")
        if whole:
            self.lines.extend(whole)
            with self.lock:
                self.target.write("".join(f"[{self.prefix}] {line}\n" for line in whole))
                self.target.flush()
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.write("\n")


@dataclass
class Cluster:
    """One context's run: its phase, its exit code and its table line."""

    context: str
    phase: str = PENDING
    code: int | None = None
    outcome: str = "not started"
    detail: str = ""
    document: Any = None  # status -o json: the cluster's report
    abandoned: bool = False  # Ctrl-C decided its line before its thread ended
    done: threading.Event = field(default_factory=threading.Event)
    changed: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Plan:
    """What each cluster runs: `connect(context)`, then `command(connection, result,
    out, err, on_made)` returning its exit code (status sets `result.document`)."""

    command_name: str
    connect: Callable[[str], Connection]
    command: Callable[[Connection, Cluster, TextIO, TextIO, Callable[[], None]], int]
    writes: bool
    json_output: bool = False


def run_fleet(contexts: list[str], plan: Plan, out: TextIO, err: TextIO) -> int:
    """Run `plan` on every context in parallel; print the table; return the fleet code."""
    lock = threading.Lock()  # the phases and the stop flag
    write_lock = threading.Lock()  # stderr
    stop = threading.Event()
    clusters = [Cluster(c) for c in contexts]
    threads = [
        threading.Thread(
            target=_one,
            args=(cl, plan, stop, lock, _Prefixed(err, cl.context, write_lock)),
            name=f"spilloverctl-{cl.context}",
            daemon=True,  # past its write a cluster may be abandoned; see _interrupted
        )
        for cl in clusters
    ]
    interrupted = False
    try:
        for thread in threads:
            thread.start()
        for cl in clusters:
            while not cl.done.wait(0.2):
                pass
    except KeyboardInterrupt:
        interrupted = True
    again = threading.Event()
    previous = _on_sigint(lambda *_: again.set()) if interrupted else None
    try:
        if interrupted:
            _interrupted(plan, clusters, stop, lock, err, write_lock, again)
        with lock:  # a snapshot: an abandoned thread may still be running
            shown = [
                Cluster(c.context, c.phase, c.code, c.outcome, c.detail, c.document)
                for c in clusters
            ]
        _table(plan, shown, out, interrupted)
        if interrupted:
            with write_lock:
                err.write(
                    "spilloverctl: interrupted; each cluster is changed or untouched, as "
                    "the table says (check with `spilloverctl status --context NAME`)\n"
                )
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return fleet_code([exit_codes.INTERRUPTED if c.code is None else c.code for c in shown])


def _on_sigint(handler: Callable[..., None]) -> Any:
    """After the first Ctrl-C, until the table is out: a further Ctrl-C only notes
    itself (a KeyboardInterrupt then could end the process with a write in flight)."""
    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: no signal reaches this code there
        return None


def _one(
    cl: Cluster, plan: Plan, stop: threading.Event, lock: threading.Lock, err: _Prefixed
) -> None:
    out = _Prefixed(err.target, cl.context, err.lock)
    result = Cluster(cl.context)

    def on_made() -> None:
        with lock:
            cl.phase = WRITTEN
        cl.changed.set()
        if stop.is_set():
            raise _Stopped

    try:
        conn = plan.connect(cl.context)
        with lock:
            if stop.is_set():  # not started: nothing was sent
                result.code, result.outcome = exit_codes.INTERRUPTED, "not started"
                result.detail = "interrupted before its write: nothing was sent"
                return
            cl.phase = WRITING if plan.writes else WRITTEN
        result.code = plan.command(conn, result, cast(TextIO, out), cast(TextIO, err), on_made)
        result.outcome = _outcome(plan, result.code)
    except _Stopped:
        result.code, result.outcome = exit_codes.INTERRUPTED, "changed, wait interrupted"
    except (BadInput, ClientError) as exc:
        err.write(f"spilloverctl: error: {exc.message}\n")
        result.code, result.outcome = exit_code(exc), _failed(exit_code(exc))
        result.detail = _first(exc.message)
    except BaseException:  # a bug in one cluster's run must not hide the others
        err.write("spilloverctl: internal error (a bug in spilloverctl; please report it)\n")
        err.write(traceback.format_exc())
        result.code, result.outcome = exit_codes.INTERNAL, "failed (bug)"
        result.detail = "internal error: see its traceback above"
    finally:
        out.flush()
        err.flush()
        written = cl.phase == WRITTEN
        if result.code is not None and not result.detail:
            result.detail = _describe(plan, result, out.lines, err.lines, written)
        with lock:
            cl.phase = FINISHED
            if not cl.abandoned:  # else the table has been decided without it
                cl.code, cl.outcome = result.code, result.outcome
                cl.detail, cl.document = result.detail, result.document
        cl.changed.set()
        cl.done.set()


def _interrupted(
    plan: Plan,
    clusters: list[Cluster],
    stop: threading.Event,
    lock: threading.Lock,
    err: TextIO,
    write_lock: threading.Lock,
    again: threading.Event,
) -> None:
    """Ctrl-C: start no cluster's write; let every write in flight finish, whatever
    further Ctrl-C comes (`again`; each write is bounded by the request timeouts)."""
    with lock:
        stop.set()
        writing = [cl for cl in clusters if cl.phase == WRITING]
    if writing:
        names = ", ".join(cl.context for cl in writing)
        with write_lock:
            err.write(
                f"spilloverctl: interrupted; finishing the write in flight on {names} (each "
                "cluster's change is all or nothing; another Ctrl-C does not cut it)\n"
            )
            err.flush()
    for cl in writing:
        while not cl.changed.wait(0.2):
            if again.is_set():
                again.clear()
                with write_lock:
                    err.write(f"spilloverctl: still finishing the write on {cl.context}\n")
                    err.flush()
    with lock:
        for cl in clusters:
            if cl.phase == FINISHED:
                continue
            cl.abandoned = True
            cl.code = exit_codes.INTERRUPTED
            if not plan.writes:
                cl.outcome, cl.detail = "interrupted", "not read to the end"
            elif cl.phase == WRITTEN:
                cl.outcome = "changed, wait interrupted"
                cl.detail = "the change stands; its wait was abandoned"
            else:
                cl.outcome = "not started"
                cl.detail = "interrupted before its write: nothing was sent"


def _outcome(plan: Plan, code: int) -> str:
    if plan.command_name == "status":
        return {exit_codes.OK: "consistent", exit_codes.MISMATCH: "mismatch"}.get(
            code, _failed(code)
        )
    return "done" if code == exit_codes.OK else _failed(code)


def _failed(code: int) -> str:
    name = {c.code: c.name for c in exit_codes.TABLE}.get(code, str(code))
    if code == exit_codes.EXTRA_REFUSED:
        return "changed, extra not done"
    if code == exit_codes.TIMEOUT:
        return "changed, wait timed out"
    return f"failed ({name})"


def _first(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= DETAIL_MAX else line[: DETAIL_MAX - 3] + "..."


def _describe(
    plan: Plan, cl: Cluster, out_lines: list[str], err_lines: list[str], written: bool
) -> str:
    """What is in effect, or what failed, in one line, from what the cluster printed."""
    if plan.command_name == "status":
        return _status_detail(cl, out_lines)
    if cl.code == exit_codes.EXTRA_REFUSED:
        last = [line for line in err_lines if "; not done: " in line]
        return _first(last[-1].removeprefix("spilloverctl: ")) if last else "see its lines above"
    if cl.code == exit_codes.INTERRUPTED:
        return "the change stands; its wait was abandoned" if written else ""
    if cl.code != exit_codes.OK:
        errors = [line for line in err_lines if line.startswith("spilloverctl: ")]
        return _first(errors[-1].removeprefix("spilloverctl: ")) if errors else ""
    # Done: the last lines of the single-cluster command say what stands.
    shown = [line for line in out_lines if line.strip()]
    return _first("; ".join(shown[-2:])) if shown else ""


def _status_detail(cl: Cluster, out_lines: list[str]) -> str:
    if cl.document is not None:
        doc = cl.document
        env = (doc.get("deployment") or {}).get("env") or {}
        spec = (doc.get("policy") or {}).get("spec") or {}
        effect = ", ".join(f"{k}={v}" for k, v in env.items()) or "no spillover variable set"
        problems = [f for f in doc.get("findings") or [] if f.get("severity") != "NOTE"]
        head = f"policy enabled={spec.get('enabled')}; in effect: {effect}"
        if problems:
            head += f"; {len(problems)} finding(s), first: {problems[0].get('message')}"
        return _first(head)
    shown = [line for line in out_lines if line.strip()]
    return _first(shown[-1]) if shown else ""


def _table(plan: Plan, clusters: list[Cluster], out: TextIO, interrupted: bool) -> None:
    if plan.json_output:
        document = {
            "clusters": [
                {
                    "context": cl.context,
                    "exitCode": exit_codes.INTERRUPTED if cl.code is None else cl.code,
                    "outcome": cl.outcome,
                    "detail": cl.detail,
                    "report": cl.document,
                }
                for cl in clusters
            ],
            "exitCode": fleet_code(
                [exit_codes.INTERRUPTED if c.code is None else c.code for c in clusters]
            ),
        }
        out.write(json.dumps(document, indent=2) + "\n")
        return
    width = max(len(cl.context) for cl in clusters)
    outcome_width = max(len(cl.outcome) for cl in clusters)
    out.write(f"{'CONTEXT':<{width}}  {'EXIT':>4}  {'OUTCOME':<{outcome_width}}  DETAIL\n")
    for cl in clusters:
        code = exit_codes.INTERRUPTED if cl.code is None else cl.code
        out.write(f"{cl.context:<{width}}  {code:>4}  {cl.outcome:<{outcome_width}}  {cl.detail}\n")
    out.write(_summary(plan, clusters, interrupted) + "\n")
    out.flush()


def _summary(plan: Plan, clusters: list[Cluster], interrupted: bool) -> str:
    codes = [exit_codes.INTERRUPTED if cl.code is None else cl.code for cl in clusters]
    done = [cl.context for cl, code in zip(clusters, codes, strict=True) if code == 0]
    rest = [
        f"{cl.context} (exit {code})"
        for cl, code in zip(clusters, codes, strict=True)
        if code != exit_codes.OK
    ]
    verb = "consistent" if plan.command_name == "status" else "done"
    text = f"fleet {plan.command_name}: {len(done)} of {len(clusters)} clusters {verb}"
    if rest:
        text += "; not " + verb + ": " + ", ".join(rest)
    if interrupted:
        text += "; interrupted"
    return text + f"; exit {fleet_code(codes)}"
