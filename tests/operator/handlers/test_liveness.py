"""Liveness answers whether the operator's loop makes progress, never whether the API
server answers (spillover_operator.handlers.liveness)."""

from __future__ import annotations

import urllib.error
import urllib.request

from spillover_operator.handlers.liveness import PATH, Liveness, serve


class FakeClock:
    """A clock the test moves by hand (a test double for time.monotonic)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_alive_before_the_first_tick_and_while_ticks_are_recent() -> None:
    clock = FakeClock()
    alive = Liveness(stale_after=30, clock=clock)
    assert alive.verdict()[0] is True
    alive.tick()
    clock.now += 29
    ok, why = alive.verdict()
    assert ok is True
    assert "29.0 s ago" in why


def test_wedged_once_the_loop_has_not_ticked_for_longer_than_stale_after() -> None:
    clock = FakeClock()
    alive = Liveness(stale_after=30, clock=clock)
    alive.tick()
    clock.now += 31
    ok, why = alive.verdict()
    assert ok is False
    assert why == "wedged: the event loop has not ticked for 31 s"
    alive.tick()
    assert alive.verdict()[0] is True


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_endpoint_answers_200_or_500_from_its_own_thread() -> None:
    clock = FakeClock()
    alive = Liveness(stale_after=30, clock=clock)
    alive.tick()
    server = serve(alive, port=_free_port(), host="127.0.0.1")
    assert server is not None
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert _get(base + PATH)[0] == 200
        clock.now += 60
        status, body = _get(base + PATH)
        assert status == 500
        assert "wedged" in body
        assert _get(base + "/metrics")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_port_zero_serves_nothing() -> None:
    assert serve(Liveness(), port=0) is None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
