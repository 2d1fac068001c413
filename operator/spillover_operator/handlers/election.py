"""The leader election's requests and threads (its rules: `spillover_operator.domain.leadership`).

`Elector.try_acquire` reads (and takes, or renews) the leader Lease of every namespace the
operator watches, in name order; the start-up handler calls it every `RETRY_SECONDS`
until it holds them all (`lead`), then `Elector.keep` renews them on a thread of its
own. `Elector.gate` is the write gate of the operator's connection: it lets a write
through only while the leader's last renewal is recent enough. kopf's own writes (its
Events, its annotations, the finalizer) pass the same gate: `gated_session` is the
HTTP session kopf uses (the login handler in main.py), whose middleware refuses every
request but a read while the gate is closed, so a deposed leader posts no Event and
patches nothing after its Lease may have passed to another. `release` lets the Leases
go when the operator stops (kopf's cleanup), after closing the gate.

While waiting, `StandbyHealth` answers kopf's readiness endpoint (kopf serves it only
once its start-up handlers are done): a standby is Ready and passive.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import http.server
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import kopf

from spillover_operator.client import (
    Conflict,
    Connection,
    WriteRefused,
    create_lease,
    find_lease,
    post_event,
    update_lease,
)
from spillover_operator.domain import leadership
from spillover_operator.domain.model import EVENT_LEADER_ELECTED
from spillover_operator.handlers.metrics import Metrics

log = logging.getLogger(__name__)

# How long a write waits for the leader's renewal before it is refused (and retried).
GATE_WAIT_SECONDS = 5.0


# Requests that write nothing: kopf's reads and watches pass the gate untouched.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class LeadershipLost(RuntimeError):
    """Another operator holds a Lease this one led with."""


class WriteGateClosed(aiohttp.ClientConnectionError):
    """A write of kopf's refused by the leader's write gate before it was sent. A
    connection error to kopf: it retries the request (its `error_backoffs`), as our
    own writes are retried after `WriteRefused`."""


def _exit_lost(message: str) -> None:
    log.critical("%s: exiting (a standby again after the restart)", message)
    logging.shutdown()
    os._exit(leadership.EXIT_LOST)


class Elector:
    """Holds (or waits for) the leader Lease in each of `namespaces`."""

    def __init__(
        self,
        conn: Connection,
        namespaces: Sequence[str],
        me: str,
        metrics: Metrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        on_lost: Callable[[str], None] = _exit_lost,
        duration: int = leadership.DURATION_SECONDS,
        renew_deadline: float = leadership.RENEW_DEADLINE_SECONDS,
    ) -> None:
        self.conn = dataclasses.replace(conn, write_gate=None)  # the Lease is never gated
        self.namespaces = sorted(set(namespaces))
        self.me = me
        self.metrics = metrics
        self.clock = clock
        self.wall = wall
        self.on_lost = on_lost
        self.duration = duration
        self.term = leadership.Term(deadline=renew_deadline)
        self.cond = threading.Condition()
        self.leases: dict[str, dict[str, Any]] = {}  # namespace -> our Lease as written
        self.seen: dict[str, leadership.Seen | None] = {}
        self.leading = False
        self.led: set[str] = set()  # the namespaces whose Lease this process took
        self.stopped = False
        self.last_read: float | None = None  # when a read of the Lease last succeeded
        self.last_problem = ""
        self.standby_reason = ""
        self.standby_holder: dict[str, str] = {}  # namespace -> the leader a standby saw
        self.announcements: list[tuple[str, str]] = []  # (namespace, LeaderElected message)
        for namespace in self.namespaces:
            self._gauge(namespace, 0)

    # -- the standby ------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """One round: read each Lease and take (or renew) it where the rules allow;
        True once this operator holds every one (it leads from then on)."""
        started = self.clock()
        for namespace in self.namespaces:
            if not self._acquire_one(namespace):
                return False
        with self.cond:
            if self.stopped:
                return False
            self.term.renewed(started)
            self.leading = True
            self.cond.notify_all()
        self._announce()
        return True

    def _announce(self) -> None:
        """Post the LeaderElected Events of the namespaces just taken, through the write
        gate (with no wait): like every other write, only while the Lease is certainly
        ours."""
        gated = dataclasses.replace(self.conn, write_gate=lambda: self.gate(wait=0))
        while self.announcements:
            namespace, message = self.announcements.pop(0)
            lease = self.leases.get(namespace) or {}
            try:
                post_event(
                    gated.in_namespace(namespace), lease, "Normal", EVENT_LEADER_ELECTED, message
                )
            except Exception as exc:
                log.warning("cannot post the LeaderElected Event in %s: %s", namespace, exc)

    def _acquire_one(self, namespace: str) -> bool:
        conn = self.conn.in_namespace(namespace)
        try:
            lease = find_lease(conn, leadership.LEASE_NAME)
        except Exception as exc:
            # Count a whole duration again from the next read: the leader may have been
            # cut off as we were (an API outage), and renews as soon as it is back.
            self.seen[namespace] = None
            self._problem(f"cannot read the leader Lease in {namespace}: {exc}")
            return False
        self.last_read = self.clock()
        wall = self.wall()
        decision = leadership.decide(lease, self.me, self.seen.get(namespace), self.clock())
        self.seen[namespace] = decision.seen
        if decision.action is leadership.Action.WAIT:
            holder = leadership.holder_of(lease)
            if self.standby_holder.get(namespace) != holder:  # once per leader
                log.info("standby (passive) in namespace %s: %s", namespace, decision.reason)
            self.standby_holder[namespace] = holder
            self.standby_reason = decision.reason
            return False
        spec = leadership.lease_spec(self.me, wall, lease=lease, duration=self.duration)
        try:
            if lease is None:
                written = create_lease(conn, leadership.LEASE_NAME, spec)
            else:
                version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
                written = update_lease(conn, leadership.LEASE_NAME, spec, version)
        except Conflict:
            log.info("namespace %s: another operator wrote the leader Lease first", namespace)
            return False
        except Exception as exc:
            self._problem(f"cannot write the leader Lease in {namespace}: {exc}")
            return False
        self.leases[namespace] = written
        if namespace not in self.led:
            self._elected(namespace, lease, decision.reason)
        return True

    def _elected(self, namespace: str, before: Any, why: str) -> None:
        previous = leadership.holder_of(before) or "none"
        message = (
            f"{self.me} leads the spillover operators of namespace {namespace} "
            f"({why}; previous holder: {previous})"
        )
        log.info("%s", message)
        self.led.add(namespace)
        self._gauge(namespace, 1)
        self.announcements.append((namespace, message))  # posted once leading (_announce)

    def _problem(self, message: str) -> None:
        if message != self.last_problem:
            log.warning("%s", message)
        self.last_problem = message

    def standby_health(self) -> tuple[bool, str]:
        """A standby's readiness: Ready while it can read the Lease."""
        last = self.last_read
        if last is None or self.clock() - last > 3 * leadership.RETRY_SECONDS + 5:
            return False, f"standby: {self.last_problem or 'the leader Lease not read yet'}"
        return True, f"standby (passive): {self.standby_reason or 'waiting for the Lease'}"

    # -- the leader --------------------------------------------------------------------

    def renew(self) -> bool:
        """One renewal of every Lease held; False when one failed (tried again soon).
        Raises LeadershipLost when another operator holds one."""
        started = self.clock()
        for namespace in self.namespaces:
            if not self._renew_one(namespace):
                return False
        with self.cond:
            if self.stopped:
                return False
            self.term.renewed(started)
            self.cond.notify_all()
        return True

    def _renew_one(self, namespace: str) -> bool:
        conn = self.conn.in_namespace(namespace)
        held = self.leases.get(namespace)
        try:
            if held is None:
                raise Conflict("no Lease written yet")
            version = str((held.get("metadata") or {}).get("resourceVersion") or "")
            spec = leadership.lease_spec(self.me, self.wall(), lease=held, duration=self.duration)
            self.leases[namespace] = update_lease(conn, leadership.LEASE_NAME, spec, version)
            return True
        except Conflict:
            pass  # written by someone since: read who holds it
        except Exception as exc:
            self._problem(f"cannot renew the leader Lease in {namespace}: {exc}")
            return False
        try:
            lease = find_lease(conn, leadership.LEASE_NAME)
        except Exception as exc:
            self._problem(f"cannot read the leader Lease in {namespace}: {exc}")
            return False
        holder = leadership.holder_of(lease)
        if lease is None or holder != self.me:
            raise LeadershipLost(
                f"namespace {namespace}: the leader Lease is now held by {holder or 'nobody'}"
            )
        self.leases[namespace] = lease  # ours, touched by someone: renewed from it next
        return False

    def keep(self) -> None:
        """Renew every RENEW_SECONDS (after a failure every RETRY_SECONDS) until stopped;
        on LeadershipLost, `on_lost` (by default: exit)."""
        delay = leadership.RENEW_SECONDS
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.stopped, timeout=delay)
                if self.stopped:
                    return
            try:
                ok = self.renew()
            except LeadershipLost as exc:
                self._end()
                self.on_lost(str(exc))
                return
            if ok and self.last_problem:
                log.info("the leader Lease is renewed again")
                self.last_problem = ""
            delay = leadership.RENEW_SECONDS if ok else leadership.RETRY_SECONDS

    def start_keeping(self) -> threading.Thread:
        thread = threading.Thread(target=self.keep, daemon=True, name="leader lease")
        thread.start()
        return thread

    def confirmed(self) -> bool:
        with self.cond:
            return self.leading and not self.stopped and self.term.confirmed(self.clock())

    def gate(self, wait: float = GATE_WAIT_SECONDS) -> None:
        """The write gate: return at once while leading with a recent renewal; else wait
        up to `wait` s for one, then refuse (WriteRefused)."""
        with self.cond:
            ok = self.cond.wait_for(
                lambda: self.leading and not self.stopped and self.term.confirmed(self.clock()),
                timeout=wait,
            )
        if not ok:
            raise WriteRefused(
                f"not written: this operator ({self.me}) is not the confirmed leader of "
                f"namespace(s) {', '.join(self.namespaces)} (the leader Lease was not "
                f"renewed within {self.term.deadline:g} s)"
            )

    def _end(self) -> None:
        with self.cond:
            self.leading = False
            self.term.end()
            self.led.clear()
            self.cond.notify_all()
        for namespace in self.namespaces:
            self._gauge(namespace, 0)

    def release(self) -> None:
        """Stop: close the gate, stop renewing and let the Leases held go (a standby
        takes them at its next read)."""
        with self.cond:
            was_leading = self.leading
            self.stopped = True
            self.cond.notify_all()
        self._end()
        if not was_leading:
            return
        for namespace, held in self.leases.items():
            version = str((held.get("metadata") or {}).get("resourceVersion") or "")
            try:
                update_lease(
                    self.conn.in_namespace(namespace),
                    leadership.LEASE_NAME,
                    leadership.released_spec(self.wall()),
                    version,
                )
                log.info("released the leader Lease in %s", namespace)
            except Exception as exc:
                log.warning("cannot release the leader Lease in %s: %s", namespace, exc)

    # -- metrics -----------------------------------------------------------------------

    def _gauge(self, namespace: str, value: int) -> None:
        if self.metrics is not None:
            self.metrics.leader.labels(namespace).set(value)


Gate = Callable[[], None]


def gate_middleware(gate_of: Callable[[], Gate | None]) -> aiohttp.ClientMiddlewareType:
    """An aiohttp client middleware that lets a request other than a read through only
    when the write gate `gate_of()` returns lets it (None: no election yet, no write)."""

    async def middleware(
        request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if request.method.upper() not in READ_METHODS:
            gate = gate_of()
            if gate is None:
                raise WriteGateClosed(
                    f"not written ({request.method} {request.url.path}): the leader "
                    "election has not started"
                )
            try:
                await asyncio.to_thread(gate)
            except WriteRefused as exc:
                raise WriteGateClosed(
                    f"not written ({request.method} {request.url.path}): {exc}"
                ) from None
        return await handler(request)

    return middleware


def gated_session(info: kopf.ConnectionInfo, gate_of: Callable[[], Gate | None]) -> Any:
    """kopf's HTTP session as kopf builds it from `info` (TLS, credentials, proxy),
    with the write gate's middleware (`gate_middleware`). Call in the event loop."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
        middlewares=(gate_middleware(gate_of),),
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )


class StandbyHealth:
    """kopf's readiness endpoint while kopf has not started it: answers `path` on
    `port` from `answer` (200 or 500), until `close`."""

    def __init__(self, endpoint: leadership.Endpoint, answer: Callable[[], tuple[bool, str]]):
        path = endpoint.path

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != path:
                    self.send_error(404)
                    return
                ok, why = answer()
                body = (why + "\n").encode()
                self.send_response(200 if ok else 500)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((endpoint.host, endpoint.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, daemon=True, name="standby health"
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


async def lead(elector: Elector, endpoint: leadership.Endpoint | None) -> None:
    """Wait, a passive standby, until `elector` holds every Lease; then keep renewing
    them on a thread. While waiting, answer readiness on `endpoint` (kopf's)."""
    if await asyncio.to_thread(elector.try_acquire):
        elector.start_keeping()
        return
    health = None
    if endpoint is not None:
        try:
            health = StandbyHealth(endpoint, elector.standby_health)
        except OSError as exc:
            log.warning("cannot answer readiness while standby on %s: %s", endpoint, exc)
    try:
        while not await asyncio.to_thread(elector.try_acquire):
            await asyncio.sleep(leadership.RETRY_SECONDS)
    finally:
        if health is not None:
            await asyncio.to_thread(health.close)
    elector.start_keeping()
