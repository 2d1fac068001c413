"""Following changes of named objects with watches, so waiting reacts when the API
server says something changed instead of sleeping before each look."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection
from typing import Any

from spillover_operator.client.connection import Connection
from spillover_operator.client.transport import HttpStatusError

# A watch ends after this long (the server closes it) and is opened again.
WATCH_SECONDS = 60


# (collection path, selector parameter, selector): ("/api/v1/namespaces/x/pods",
# "labelSelector", "app=mcp-host") or (..., "fieldSelector", "metadata.name=wrc").
Watched = tuple[str, str, str]


def named(path: str, name: str) -> Watched:
    """Watch the one object `name` of the collection at `path`."""
    return (path, "fieldSelector", f"metadata.name={name}")


class ChangeSignal:
    """Watches on collections (`Watched`: the objects a selector picks) in
    background threads; `wait(timeout)` returns True as soon as any of them reported
    an event since the last `wait`. For the collections in `keep` (watches of one named
    object), `latest(path)` is the object as its last event left it: a hint of what
    changed, not a read (None: no event yet, or it was deleted).

    A watch that cannot be opened (no `watch` permission, an old server) marks the
    signal `broken`: callers then poll as before. The threads are daemons and end
    within `WATCH_SECONDS` after `close()`.
    """

    def __init__(
        self, conn: Connection, watched: list[Watched], *, keep: Collection[str] = ()
    ) -> None:
        self._conn = conn
        self._event = threading.Event()
        self._closed = threading.Event()
        self._keep = frozenset(keep)
        self._latest: dict[str, dict[str, Any] | None] = {}
        self.broken = False
        for path, kind, selector in watched:
            thread = threading.Thread(
                target=self._follow,
                args=(path, kind, selector),
                daemon=True,
                name=f"watch {selector}",
            )
            thread.start()

    def _follow(self, path: str, kind: str, selector: str) -> None:
        query = [("watch", "1"), (kind, selector), ("timeoutSeconds", str(WATCH_SECONDS))]
        timeout = (self._conn.request_timeout[0], WATCH_SECONDS + 10.0)
        while not self._closed.is_set():
            try:
                for line in self._conn.transport.stream(path, query=query, timeout=timeout):
                    if path in self._keep:
                        self._remember(path, line)
                    self._event.set()
                    if self._closed.is_set():
                        return
            except HttpStatusError:
                self.broken = True
                self._event.set()
                return
            except Exception:
                # The API server is unreachable for a moment: the caller's safety-net
                # look still runs; watch again shortly.
                time.sleep(0.5)

    def _remember(self, path: str, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            return
        kind = event.get("type")
        if kind in ("ADDED", "MODIFIED"):
            self._latest[path] = event["object"]
        elif kind == "DELETED":
            self._latest[path] = None

    def latest(self, path: str) -> dict[str, Any] | None:
        """The object of the kept watch on `path` as its last event left it (None: no
        event yet, or deleted)."""
        return self._latest.get(path)

    def wait(self, timeout: float) -> bool:
        changed = self._event.wait(timeout)
        self._event.clear()
        return changed

    def close(self) -> None:
        self._closed.set()
