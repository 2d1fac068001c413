"""Liveness: is the operator itself making progress? Not: does the API server answer.

Two probes, two questions (manifests/base/deployment.yaml):

- readiness, kopf's ``/healthz`` on :8080: the API server answers and kopf's watches
  run. During an API outage the pod goes NotReady, and nothing else happens.
- liveness, ``/livez`` on :8081 (this module): the operator's event loop has ticked
  within ``STALE_AFTER_SECONDS``. Only a wedged operator (its loop blocked or stopped)
  fails it, and the kubelet restarts it. An API outage never does: restarting then
  would only add a back-off while the kill switch may be needed most.

The answer comes from a thread of its own, so a wedged loop gets a clear 500 rather
than a time-out (a stopped process still times out, which the kubelet counts alike).
It is the operator process's own HTTP server, so it lives with the kopf wiring; its
port is a setting (`OperatorSettings.liveness_port`).
"""

from __future__ import annotations

import http.server
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spillover_operator.domain.settings import LIVENESS_PORT_VAR

log = logging.getLogger(__name__)

PATH = "/livez"
TICK_SECONDS = 1.0
# Three missed probes of 10 s restart a wedged operator within about a minute; a loop
# that is merely busy (a burst of events) ticks well within this.
STALE_AFTER_SECONDS = 30.0


@dataclass
class Liveness:
    """The time of the event loop's last tick, and the verdict on it."""

    stale_after: float = STALE_AFTER_SECONDS
    clock: Callable[[], float] = time.monotonic
    last_tick: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def tick(self) -> None:
        with self._lock:
            self.last_tick = self.clock()

    def verdict(self) -> tuple[bool, str]:
        """(alive, why): alive until the loop has gone `stale_after` without a tick."""
        with self._lock:
            last = self.last_tick
        if last is None:
            return True, "starting: the event loop has not ticked yet"
        age = self.clock() - last
        if age > self.stale_after:
            return False, f"wedged: the event loop has not ticked for {age:.0f} s"
        return True, f"ok: the event loop ticked {age:.1f} s ago"


def serve(liveness: Liveness, port: int, host: str = "0.0.0.0") -> http.server.HTTPServer | None:
    """Answer GET /livez on `port` from a daemon thread (0: not at all)."""
    if port <= 0:
        log.info("liveness endpoint disabled (%s=%d)", LIVENESS_PORT_VAR, port)
        return None

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != PATH:
                self.send_error(404, f"only {PATH} is served here")
                return
            alive, why = liveness.verdict()
            body = (why + "\n").encode()
            self.send_response(200 if alive else 500)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per probe would drown the operator's log

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="liveness").start()
    log.info("liveness served on :%d%s", port, PATH)
    return server
