"""`kill`, `restore` and `status` on several clusters at once (`--context` given more
than once, or `--all-contexts`): production is several clusters, and an incident must
not mean one command per context by hand.

Each cluster runs in a thread of its own with its own connection, exactly the command
one `--context` runs (`change.cmd_change`, `status.cmd_status`); its lines go to stderr,
each prefixed with `[context]`, and stdout gets one line per cluster as soon as that
cluster's outcome is known, then a summary. The exit code is the worst of the clusters'
by `FLEET_PRECEDENCE` (docs/exit-codes.md).

The fleet never hangs: each cluster has a bound (`Plan.context_timeout`, the
`--context-timeout` flag) on its credentials, its connection and its change, and with
--wait its `--timeout` more once the change is made. A cluster past its bound is given
up (`timed out`): its thread is a daemon, which may be stuck where nothing can interrupt
it (an exec credential plugin that never returns, inside the kubernetes package's
loader), so the command prints its line and ends without it; the plugins it started are
stopped (`client.exec_plugins`), and its write gate refuses any write it would still
try.

Ctrl-C: a cluster whose write has not begun is never started; a cluster whose write is
in flight finishes it (one all-or-nothing write each: the kill switch first, and with
--direct the Deployment patch too) before the command ends, whatever further Ctrl-C
arrives, within its bound; a wait is abandoned (the change stands). The table says
which is which.
"""

from __future__ import annotations

import dataclasses
import io
import json
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TextIO, cast

from spillover_operator import exit_codes
from spillover_operator.client import ClientError, Connection
from spillover_operator.client.exec_plugins import Plugins

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
# Seconds each cluster has for its credentials, its connection and its change
# (`--context-timeout`): a kill that works takes about a second; a login that waits for
# someone, or a plugin that hangs, must not hold the other clusters' table.
DEFAULT_CONTEXT_TIMEOUT: Final = 60.0
POLL_S: Final = 0.2  # the longest the main thread sleeps between looks at the clusters
# At the end, how long the clusters given up may take to wind down (their plugins were
# stopped: their threads then fail at once) before the command ends without them.
WIND_DOWN_S: Final = 0.5

# A cluster's phase: the fleet's Ctrl-C decides from it what it may abandon, and a
# cluster past its bound is reported by it.
PENDING, WRITING, WRITTEN, FINISHED = "pending", "writing", "written", "finished"
TIMED_OUT = "timed out"


class _Stopped(BaseException):
    """Raised in a cluster's thread at the point after its write when Ctrl-C came (or
    when the fleet gave the cluster up): the change stands, the wait is abandoned. A
    BaseException: no handler of an expected failure may take it for one."""


def fleet_code(codes: list[int]) -> int:
    """The fleet's exit code: 0 only when every cluster's is 0."""
    for code in FLEET_PRECEDENCE:
        if code in codes:
            return code
    return max(codes, default=exit_codes.OK)


def shown(text: str) -> str:
    """`text` as one line of the table: every character that is not printable (a
    newline, a carriage return, an escape sequence, a line separator) written escaped as
    in a Python string (`\\n`, `\\x1b`, `\\u2028`), and a backslash doubled, so that a
    context name (or a message naming it) can neither add a line nor forge a row."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(
        "\\\\" if ch == "\\" else ch if ch.isprintable() else repr(ch)[1:-1] for ch in text
    )


def _one_line(text: str) -> str:
    """`text` with every character that is not printable escaped (as `shown`, but a
    backslash left as it is: a DETAIL is read, not matched)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _escaped_name(text: str, context: str) -> str:
    """`text` with the context's name in it escaped (a message naming it stays one line)."""
    name = shown(context)
    return text if name == context else text.replace(context, name)


class _Prefixed(io.TextIOBase):
    """A cluster's stdout or stderr: whole lines, each prefixed with `[context]`, written
    to the shared stream under one lock, so clusters never interleave within a line.
    The context's name is written escaped (`shown`) wherever a line names it. Muted once
    the fleet has given the cluster up: its line in the table is decided, and the command
    may end while its thread still runs."""

    def __init__(self, target: TextIO, context: str, lock: threading.Lock) -> None:
        self.target, self.context, self.lock = target, context, lock
        self.prefix = shown(context)
        self.pending = ""
        self.muted = False
        self.lines: list[str] = []  # everything written, for the cluster's table line

    def write(self, text: str) -> int:
        self.pending += _escaped_name(text, self.context)
        *whole, self.pending = self.pending.split("\n")
        if whole:
            self.lines.extend(whole)
            with self.lock:
                if not self.muted:
                    self.target.write("".join(f"[{self.prefix}] {line}\n" for line in whole))
                    self.target.flush()
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.write("\n")

    def mute(self) -> None:
        with self.lock:
            self.muted = True


@dataclass
class Cluster:
    """One context's run: its phase, its exit code and its table line."""

    context: str
    phase: str = PENDING
    code: int | None = None
    outcome: str = "not started"
    detail: str = ""
    document: Any = None  # status -o json: the cluster's report
    abandoned: bool = False  # its line was decided before its thread ended
    sent: bool = False  # a write request was sent (it passed the write gate)
    plugins: Plugins = field(default_factory=Plugins)  # exec plugins its thread started
    plugin_stopped: bool = False  # one was stopped: its thread is about to end


@dataclass(frozen=True)
class Plan:
    """What each cluster runs: `connect(context)`, then `command(connection, result,
    out, err, on_made)` returning its exit code (status sets `result.document`).

    `context_timeout`: seconds each cluster has from its start for its credentials, its
    connection and its command; once its change is made (`on_made`), `wait_timeout`
    more (--wait's --timeout)."""

    command_name: str
    connect: Callable[[str], Connection]
    command: Callable[[Connection, Cluster, TextIO, TextIO, Callable[[], None]], int]
    writes: bool
    json_output: bool = False
    context_timeout: float = DEFAULT_CONTEXT_TIMEOUT
    wait_timeout: float = 0.0


def run_fleet(contexts: list[str], plan: Plan, out: TextIO, err: TextIO) -> int:
    """Run `plan` on every context in parallel; print each cluster's line as soon as it
    is known, then the summary; return the fleet code."""
    return _Fleet(contexts, plan, out, err).run()


class _Fleet:
    def __init__(self, contexts: list[str], plan: Plan, out: TextIO, err: TextIO) -> None:
        self.plan, self.out, self.err = plan, out, err
        self.lock = threading.Lock()  # the phases, `abandoned`, `sent` and the stop flag
        self.write_lock = threading.Lock()  # stderr
        self.stop = threading.Event()
        self.wake = threading.Event()  # a cluster finished, or Ctrl-C
        self.interrupts = 0  # Ctrl-C seen (the SIGINT handler counts them)
        self.noted = 0  # ... and answered on stderr
        self.clusters = [Cluster(c) for c in contexts]
        self.streams = {
            cl.context: (
                _Prefixed(err, cl.context, self.write_lock),
                _Prefixed(err, cl.context, self.write_lock),
            )
            for cl in self.clusters
        }
        self.threads = [
            threading.Thread(
                target=self._one,
                args=(cl,),
                name=f"spilloverctl-{shown(cl.context)}",
                daemon=True,  # a cluster may be given up while it runs: see the module
            )
            for cl in self.clusters
        ]
        self.width = max(len(shown(cl.context)) for cl in self.clusters)
        self.outcome_width = max(len(o) for o in _outcomes(plan))

    def run(self) -> int:
        previous = _on_sigint(self._interrupt)
        try:
            if not self.plan.json_output:
                self.out.write(
                    f"{'CONTEXT':<{self.width}}  {'EXIT':>4}  "
                    f"{'OUTCOME':<{self.outcome_width}}  DETAIL\n"
                )
                self.out.flush()
            start = time.monotonic()
            for thread in self.threads:
                thread.start()
            undecided = list(self.clusters)
            while undecided:
                self._answer_interrupts(undecided)
                now = time.monotonic()
                for cl in list(undecided):
                    if self._decide(cl, start, now):
                        undecided.remove(cl)
                        self._row(cl)
                if undecided:
                    until = min(self._deadline(cl, start) for cl in undecided) - now
                    self.wake.wait(max(0.01, min(POLL_S, until)))
                    self.wake.clear()
            self._end()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            self._wind_down()
        return fleet_code([_code(cl) for cl in self.clusters])

    def _interrupt(self, *_: Any) -> None:
        """SIGINT while the fleet runs: noted, answered by the main loop (a
        KeyboardInterrupt could cut a line of the table, or end the process with a
        write in flight)."""
        self.interrupts += 1
        self.wake.set()

    def _answer_interrupts(self, undecided: list[Cluster]) -> None:
        """Ctrl-C: start no cluster's write; let every write in flight finish, whatever
        further Ctrl-C comes (each write is bounded by the request timeouts and by the
        cluster's bound)."""
        if self.interrupts == self.noted:
            return
        first = self.noted == 0
        self.noted = self.interrupts
        with self.lock:
            self.stop.set()
            writing = [shown(cl.context) for cl in undecided if cl.phase == WRITING]
        if not writing:
            return
        with self.write_lock:
            if first:
                self.err.write(
                    f"spilloverctl: interrupted; finishing the write in flight on "
                    f"{', '.join(writing)} (each cluster's change is all or nothing; "
                    "another Ctrl-C does not cut it)\n"
                )
            else:
                for name in writing:
                    self.err.write(f"spilloverctl: still finishing the write on {name}\n")
            self.err.flush()

    def _deadline(self, cl: Cluster, start: float) -> float:
        bound = start + self.plan.context_timeout
        return bound + self.plan.wait_timeout if cl.phase == WRITTEN else bound

    def _decide(self, cl: Cluster, start: float, now: float) -> bool:
        """Whether `cl`'s line is known: its thread finished, Ctrl-C decided it, or it
        is past its bound (then given up: its plugins stopped, its output muted)."""
        with self.lock:
            if cl.phase == FINISHED:
                return True  # its thread set its result
            interrupted = self.stop.is_set() and cl.phase != WRITING
            if not interrupted and now < self._deadline(cl, start):
                return False
            cl.abandoned = True
            phase, sent = cl.phase, cl.sent
        for stream in self.streams[cl.context]:
            stream.mute()
        plugins = cl.plugins.stop()
        cl.plugin_stopped = bool(plugins)
        if interrupted:
            _interrupted_line(self.plan, cl, phase)
        else:
            _timed_out_line(self.plan, cl, phase, sent, plugins)
        return True

    def _row(self, cl: Cluster) -> None:
        if self.plan.json_output:
            return
        self.out.write(
            f"{shown(cl.context):<{self.width}}  {_code(cl):>4}  "
            f"{cl.outcome:<{self.outcome_width}}  {_one_line(cl.detail)}\n"
        )
        self.out.flush()

    def _end(self) -> None:
        if self.plan.json_output:
            _json_document(self.clusters, self.out)
        else:
            self.out.write(_summary(self.plan, self.clusters, self.noted > 0) + "\n")
            self.out.flush()
        if self.noted:
            with self.write_lock:
                self.err.write(
                    "spilloverctl: interrupted; each cluster is changed or untouched, as "
                    "the table says (check with `spilloverctl status --context NAME`)\n"
                )
                self.err.flush()

    def _wind_down(self) -> None:
        """The clusters given up: stop any plugin started since, and give the threads
        whose plugin was stopped a moment to end (they fail at once; the command does not
        wait for any other: they are daemons)."""
        until = time.monotonic() + WIND_DOWN_S
        for cl, thread in zip(self.clusters, self.threads, strict=True):
            if not cl.abandoned:
                continue
            if cl.plugins.stop():
                cl.plugin_stopped = True
            if cl.plugin_stopped and thread.is_alive():
                thread.join(max(0.0, until - time.monotonic()))

    def _one(self, cl: Cluster) -> None:
        out, err = self.streams[cl.context]
        plan, lock = self.plan, self.lock
        result = Cluster(cl.context)

        def on_made() -> None:
            with lock:
                cl.phase = WRITTEN
                stopped = self.stop.is_set() or cl.abandoned
            self.wake.set()
            if stopped:
                raise _Stopped

        def write_gate() -> None:
            with lock:
                if cl.abandoned:  # given up: its line says what it did; nothing more
                    raise _Stopped
                cl.sent = True

        try:
            with cl.plugins.owning():
                conn = plan.connect(cl.context)
                conn = dataclasses.replace(conn, write_gate=_chain(write_gate, conn.write_gate))
                with lock:
                    if self.stop.is_set() or cl.abandoned:  # not started: nothing was sent
                        result.code, result.outcome = exit_codes.INTERRUPTED, "not started"
                        result.detail = "interrupted before its write: nothing was sent"
                        return
                    cl.phase = WRITING if plan.writes else WRITTEN
                result.code = plan.command(
                    conn, result, cast(TextIO, out), cast(TextIO, err), on_made
                )
                result.outcome = _outcome(plan, result.code)
        except _Stopped:
            result.code, result.outcome = exit_codes.INTERRUPTED, "changed, wait interrupted"
        except (BadInput, ClientError) as exc:
            err.write(f"spilloverctl: error: {exc.message}\n")
            result.code, result.outcome = exit_code(exc), _failed(exit_code(exc))
            result.detail = _first(_escaped_name(exc.message, cl.context))
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
                if not cl.abandoned:  # else its line has been decided without it
                    cl.code, cl.outcome = result.code, result.outcome
                    cl.detail, cl.document = result.detail, result.document
            self.wake.set()


def _chain(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    if then is None:
        return first

    def both() -> None:
        first()
        then()

    return both


def _on_sigint(handler: Callable[..., None]) -> Any:
    """Route Ctrl-C to `handler` while the fleet runs; the handler before, to put
    back (None: not the main thread, or SIGINT ignored, as in a background job)."""
    try:
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            return None
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: no signal reaches this code there
        return None


def _code(cl: Cluster) -> int:
    return exit_codes.INTERRUPTED if cl.code is None else cl.code


def _interrupted_line(plan: Plan, cl: Cluster, phase: str) -> None:
    cl.code = exit_codes.INTERRUPTED
    if not plan.writes:
        cl.outcome, cl.detail = "interrupted", "not read to the end"
    elif phase == WRITTEN:
        cl.outcome = "changed, wait interrupted"
        cl.detail = "the change stands; its wait was abandoned"
    else:
        cl.outcome = "not started"
        cl.detail = "interrupted before its write: nothing was sent"


def _timed_out_line(plan: Plan, cl: Cluster, phase: str, sent: bool, plugins: list[str]) -> None:
    """The line of a cluster past its bound. Not changed, or not known to be: exit 5
    (the cluster could not be used in time); its change made: exit 3, as a --wait
    that timed out."""
    bound = f"{plan.context_timeout:g} s (--context-timeout)"
    plugin = (
        f"its exec credential plugin '{plugins[0]}' gave no credentials within {bound} "
        "and was stopped"
        if plugins
        else ""
    )
    cl.code, cl.outcome = exit_codes.API, TIMED_OUT
    if not plan.writes:
        cl.detail = (plugin or f"not read to the end within {bound}") + "; nothing to change"
    elif phase == WRITTEN:
        cl.code, cl.outcome = exit_codes.TIMEOUT, "changed, timed out"
        total = plan.context_timeout + plan.wait_timeout
        cl.detail = (
            f"the change stands; what follows it did not end within {total:g} s "
            "(--context-timeout" + (" + --timeout)" if plan.wait_timeout else ")")
        )
    elif sent:
        cl.detail = (
            f"its write was sent but not answered within {bound}: it may have been made; "
            f"check with `spilloverctl status --context {cl.context}`"
        )
    elif phase == PENDING:
        cl.detail = (plugin or f"no connection within {bound}") + "; nothing was sent"
    else:
        cl.detail = (plugin or f"no answer within {bound} before its write") + (
            "; nothing was sent"
        )


def _outcomes(plan: Plan) -> list[str]:
    """Every OUTCOME a line of `plan` can have (the column's width, known before the
    first line)."""
    shared = [TIMED_OUT, "failed (bug)"]
    failing = (exit_codes.INTERNAL, exit_codes.BAD_INPUT, exit_codes.NOT_FOUND, exit_codes.API)
    if plan.command_name == "status":
        return [*shared, "consistent", "mismatch", "interrupted", *map(_failed, failing)]
    return [
        *shared,
        "done",
        "not started",
        "changed, timed out",
        "changed, wait interrupted",
        *map(_failed, (*failing, exit_codes.MISMATCH, exit_codes.TIMEOUT,
                       exit_codes.EXTRA_REFUSED)),
    ]  # fmt: skip


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


def _json_document(clusters: list[Cluster], out: TextIO) -> None:
    """status -o json: one document, once every cluster's line is known."""
    document = {
        "clusters": [
            {
                "context": cl.context,
                "exitCode": _code(cl),
                "outcome": cl.outcome,
                "detail": cl.detail,
                "report": cl.document,
            }
            for cl in clusters
        ],
        "exitCode": fleet_code([_code(cl) for cl in clusters]),
    }
    out.write(json.dumps(document, indent=2) + "\n")
    out.flush()


def _summary(plan: Plan, clusters: list[Cluster], interrupted: bool) -> str:
    codes = [_code(cl) for cl in clusters]
    done = [cl.context for cl, code in zip(clusters, codes, strict=True) if code == 0]
    rest = [
        f"{shown(cl.context)} (exit {code})"
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
