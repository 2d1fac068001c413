"""pytest fixtures that start a real Prometheus on loopback.

Wire in from a conftest:

    from prometheus.pytest_plugin import prometheus_binary, prometheus_factory  # noqa: F401

`prometheus_factory(targets, scrape_interval_s=0.2, labels=...)` starts a
server scraping `targets` (host:port) and returns it once ready and once every
target was scraped; every server it started is stopped at the end of the test.
A missing binary FAILS the test (never skips), naming `prometheus` and
`tests/prometheus/install.sh`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from prometheus.server import PrometheusMissing, PrometheusServer, find_prometheus

PrometheusFactory = Callable[..., PrometheusServer]


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    try:
        return find_prometheus()
    except PrometheusMissing as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


@pytest.fixture
def prometheus_factory(prometheus_binary: str, tmp_path: Path) -> Iterator[PrometheusFactory]:
    started: list[PrometheusServer] = []

    def start(
        targets: Sequence[str],
        *,
        scrape_interval_s: float = 0.2,
        labels: Mapping[str, str] | None = None,
        job: str = "mcp-host",
        wait_for_targets: bool = True,
    ) -> PrometheusServer:
        server = PrometheusServer(
            tmp_path / f"prometheus-{len(started)}",
            targets,
            scrape_interval_s=scrape_interval_s,
            labels=labels,
            job=job,
            binary=prometheus_binary,
        )
        started.append(server)
        server.start()
        if wait_for_targets:
            server.wait_for_targets_up()
        return server

    yield start
    for server in reversed(started):
        server.stop()
