"""The leader's write gate on kopf's own requests (handlers/election.py): kopf's HTTP
session (`gated_session`, what the login handler of main.py gives kopf) sends a write
(an Event, a patch of its annotations or finalizer) only while the leader's Lease is
certainly its own, by the leader's clock (injected here). The server is a real HTTP
server on localhost that records what reaches it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import kopf
import pytest
from aiohttp import web
from kubernetes.client import ApiClient, Configuration
from spillover_operator.client import Connection
from spillover_operator.domain import leadership
from spillover_operator.handlers.election import Elector, WriteGateClosed, gated_session


class Clock:
    """The leader's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _leader(clock: Clock) -> Elector:
    """An elector that has just renewed its Lease (at `clock.now`)."""
    conn = Connection.from_api_client(ApiClient(Configuration()), "ns", field_manager="op")
    elector = Elector(conn, ["ns"], "op-a", clock=clock)
    elector.leading = True
    elector.term.renewed(clock.now)
    return elector


async def _exchange(
    gate_of: Callable[[], Callable[[], None] | None], steps: list[tuple[str, Callable[[], None]]]
) -> tuple[list[str], list[str]]:
    """Send each (method, before) request through a gated session to a local server,
    calling `before` first; returns what reached the server and what was refused."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.method)
        return web.json_response({"kind": "Event"})

    app = web.Application()
    app.router.add_route("*", "/api/v1/namespaces/ns/events", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    info = kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}")
    session: Any = gated_session(info, gate_of).aiohttp_session
    refused: list[str] = []
    try:
        for method, before in steps:
            before()
            url = f"{info.server}/api/v1/namespaces/ns/events"
            try:
                async with session.request(method, url, json={"reason": "X"}) as response:
                    assert response.status == 200
            except WriteGateClosed as exc:
                refused.append(f"{method}: {exc}")
    finally:
        await session.close()
        await runner.cleanup()
    return seen, refused


def test_kopf_writes_pass_while_the_lease_is_certainly_ours_and_stop_after() -> None:
    clock = Clock()
    leader = _leader(clock)

    def gate() -> None:
        leader.gate(wait=0)

    def at(offset: float) -> Callable[[], None]:
        def move() -> None:
            clock.now = 1000.0 + offset

        return move

    deadline = leadership.RENEW_DEADLINE_SECONDS
    seen, refused = asyncio.run(
        _exchange(
            lambda: gate,
            [
                ("POST", at(0.0)),
                ("PATCH", at(deadline - 0.1)),
                # Past renewTime + leaseDuration - margin by the leader's clock: a
                # standby may take the Lease soon; kopf's Event and patch are not sent.
                ("POST", at(deadline)),
                ("PATCH", at(leadership.DURATION_SECONDS + 1)),
                # Reads go on (kopf's watches), they change nothing.
                ("GET", at(leadership.DURATION_SECONDS + 2)),
            ],
        )
    )
    assert seen == ["POST", "PATCH", "GET"]
    assert len(refused) == 2
    assert all("not the confirmed leader" in why for why in refused)
    # kopf retries a connection error with its backoffs, as our writes retry WriteRefused.
    assert issubclass(WriteGateClosed, aiohttp.ClientConnectionError)


def test_before_the_election_kopf_writes_nothing() -> None:
    seen, refused = asyncio.run(_exchange(lambda: None, [("POST", lambda: None)]))
    assert seen == []
    assert refused and "election has not started" in refused[0]


def test_a_renewal_opens_the_gate_again() -> None:
    clock = Clock()
    leader = _leader(clock)

    def gate() -> None:
        leader.gate(wait=0)

    def stale() -> None:
        clock.now += leadership.RENEW_DEADLINE_SECONDS + 1

    def renewed() -> None:
        leader.term.renewed(clock.now)

    seen, refused = asyncio.run(_exchange(lambda: gate, [("POST", stale), ("POST", renewed)]))
    assert seen == ["POST"]
    assert len(refused) == 1


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_reads_never_wait_on_the_gate(method: str) -> None:
    def closed() -> None:
        raise AssertionError("a read consulted the write gate")

    seen, refused = asyncio.run(_exchange(lambda: closed, [(method, lambda: None)]))
    assert seen == [method] and refused == []
