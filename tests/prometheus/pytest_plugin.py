"""pytest fixtures that start a real Prometheus on loopback.

Wire in from a conftest:

    from prometheus.pytest_plugin import (  # noqa: F401
        prometheus_binary, prometheus_factory, pytest_report_header, pytest_terminal_summary,
    )

`prometheus_factory(targets, scrape_interval_s=0.2, labels=..., proxy_url=None,
honor_labels=False, rule_files=(), evaluation_interval_s=10)` starts a server scraping
`targets` (host:port) and returns it once ready and once every
target was scraped; every server it started is stopped at the end of the test.
`prometheus_binary` is the `PrometheusBinary` used (path, version, why that one);
`promtool_binary` the `promtool` built beside it (tests/prometheus/binary.py).
A missing binary FAILS the test (never skips), naming `make prometheus`.

The binary and version are printed in the report header (when this conftest is
loaded before the run starts: `pytest tests/integration/...`) and in the terminal
summary of any session that used the fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from prometheus.binary import (
    PrometheusBinary,
    PrometheusMissing,
    find_prometheus,
    find_promtool,
)
from prometheus.server import PrometheusServer

PrometheusFactory = Callable[..., PrometheusServer]

_USED = pytest.StashKey[PrometheusBinary]()


def pytest_report_header(config: pytest.Config) -> str:
    try:
        return f"prometheus: {find_prometheus().describe()}"
    except PrometheusMissing as exc:
        return f"prometheus: unavailable: {exc}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    used = terminalreporter.config.stash.get(_USED, None)
    if used is not None:
        terminalreporter.write_line(f"prometheus used by the tests: {used.describe()}")


@pytest.fixture(scope="session")
def prometheus_binary(pytestconfig: pytest.Config) -> PrometheusBinary:
    try:
        binary = find_prometheus()
    except PrometheusMissing as exc:
        message = str(exc)
    else:
        pytestconfig.stash[_USED] = binary
        return binary
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def promtool_binary() -> PrometheusBinary:
    """promtool from the pinned module; a missing one fails naming `make prometheus`."""
    try:
        return find_promtool()
    except PrometheusMissing as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


@pytest.fixture
def prometheus_factory(
    prometheus_binary: PrometheusBinary, tmp_path: Path
) -> Iterator[PrometheusFactory]:
    started: list[PrometheusServer] = []

    def start(
        targets: Sequence[str],
        *,
        scrape_interval_s: float = 0.2,
        labels: Mapping[str, str] | None = None,
        job: str = "mcp-host",
        wait_for_targets: bool = True,
        proxy_url: str | None = None,
        honor_labels: bool = False,
        rule_files: Sequence[str] = (),
        evaluation_interval_s: float = 10.0,
        discovery: Mapping[str, object] | None = None,
    ) -> PrometheusServer:
        server = PrometheusServer(
            tmp_path / f"prometheus-{len(started)}",
            targets,
            scrape_interval_s=scrape_interval_s,
            labels=labels,
            job=job,
            binary=prometheus_binary.path,
            proxy_url=proxy_url,
            honor_labels=honor_labels,
            rule_files=rule_files,
            evaluation_interval_s=evaluation_interval_s,
            discovery=discovery,
        )
        started.append(server)
        server.start()
        if wait_for_targets:
            server.wait_for_targets_up()
        return server

    yield start
    for server in reversed(started):
        server.stop()
