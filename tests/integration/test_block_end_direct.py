"""The block check's end values (cluster/blocks.py) against a REAL Prometheus scraping
the simulator served over HTTP.

The end of the last block is read straight from the scrape targets Prometheus matches
(collectors/targets.py), not after Prometheus' next scrape. These tests show that the
values read that way are the values Prometheus holds once it has scraped past the end
(same targets, same series, same sums, a restart handled the same way), that the block
lines and the first-party problems are the same either way, and that a target the
harness cannot reach (Prometheus scrapes it through a proxy, as it scrapes pods over
the cluster's network) makes the check wait for the scrape instead, saying so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from prometheus.server import PrometheusServer, file_targets, free_port, write_file_targets
from spillover_harness.checks.consistency import FIRST_PARTY
from spillover_harness.cluster.blocks import (
    COUNTERS,
    Block,
    BlockChecks,
    _sums_at,
    capture_end,
    check_blocks,
)
from spillover_harness.collectors.prometheus import PERSISTED, READS, PrometheusCollector
from spillover_harness.collectors.targets import read_direct
from spillover_harness.sim.server import serve
from spillover_harness.sim.steprun import SimFaults
from test_prometheus_collector import OFF, T32, Sim

pytestmark = pytest.mark.integration

INTERVAL = 0.5
LABELS = {"namespace": "clerum", "container": "mcp-host"}
RunSpec = tuple[str, str, dict[str, str]]


@pytest.fixture
def feeding() -> Iterator[Sim]:
    """A simulator whose workflow events also move the first-party counters (the fault
    the block check's first-party line catches)."""
    server, thread = serve(host="127.0.0.1", port=0, faults=SimFaults(feed_first_party=True))
    try:
        yield Sim(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def other() -> Iterator[Sim]:
    """A second mcp-host Prometheus scrapes too, which the selector does not match."""
    server, thread = serve(host="127.0.0.1", port=0)
    try:
        yield Sim(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Forward(BaseHTTPRequestHandler):
    """An HTTP proxy that sends every GET (whatever host it names) to `upstream`."""

    upstream = ""

    def do_GET(self) -> None:
        path = urlsplit(self.path).path or "/"
        resp = requests.get(f"{self.upstream}{path}", timeout=5)
        body = resp.content
        self.send_response(resp.status_code)
        self.send_header("Content-Type", resp.headers.get("Content-Type", "text/plain"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def proxy(feeding: Sim) -> Iterator[str]:
    handler = type("Forward", (_Forward,), {"upstream": feeding.url})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _collector(prom: PrometheusServer, instance: str) -> PrometheusCollector:
    return PrometheusCollector(
        prom.url, selectors=f'instance="{instance}"', scrape_interval_s=INTERVAL
    )


def _record_run(block: Block, sim: Sim, spec: RunSpec) -> None:
    """One run on `sim`, noted in `block` as the driver does (its own counts, its end)."""
    status = sim.run(*spec)
    block.runs.append(f"{block.config}-{len(block.runs)}")
    block.persisted += status["spilloverPersisted"]
    block.reads += status["spilloverReads"]
    block.last_end = time.time()


def _run_blocks(
    collector: PrometheusCollector,
    sim: Sim,
    plan: list[tuple[str, list[RunSpec]]],
    *,
    before_last: Callable[[], None] | None = None,
) -> list[Block]:
    """Run the blocks as the driver does (first start, runs, own counts, last end),
    with a scrape of every target between two blocks (they are then separable);
    `before_last` runs at the start of the last block."""
    blocks: list[Block] = []
    for k, (config, runs) in enumerate(plan):
        block = Block(config, time.time())
        if k == len(plan) - 1 and before_last is not None:
            # Within the last block, after its start: a scrape between the two would
            # otherwise put the restart's reset into the block before's end.
            before_last()
        for spec in runs:
            _record_run(block, sim, spec)
        blocks.append(block)
        if k < len(plan) - 1:
            with collector.connect() as prom:
                collector._wait_for_scrapes(prom, block.last_end, [], 0)
    return blocks


def _after_a_scrape(collector: PrometheusCollector, end: float) -> dict[str, float]:
    """What Prometheus reports for the end once it scraped every matched target past it."""
    with collector.connect() as prom:
        deadline = collector._wait_for_scrapes(prom, end, [], 0)
        return _sums_at(collector, prom, max(deadline, end) + 0.001)


def _judged(checks: BlockChecks) -> list[str]:
    return [line for line in checks.lines if not line.startswith("counters: ")]


def _notes(checks: BlockChecks) -> list[str]:
    return [line for line in checks.lines if line.startswith("counters: ")]


def _every_block_agrees(blocks: list[Block], checks: BlockChecks) -> None:
    """Each block's line: the Prometheus deltas agree with the runs' own counts."""
    for block in blocks:
        assert any(
            line.startswith(f"block {block.config} (")
            and f"sum to persisted {block.persisted}, reads {block.reads}: agree" in line
            for line in _judged(checks)
        ), (block.config, checks.lines)


def test_the_end_read_from_the_targets_is_what_prometheus_reports_after_a_scrape(
    feeding: Sim,
    other: Sim,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    prom = prometheus_factory(
        [feeding.target, other.target], scrape_interval_s=INTERVAL, labels=LABELS
    )
    collector = _collector(prom, feeding.target)
    large = ("code-review", "large", T32)
    blocks = _run_blocks(
        collector,
        feeding,
        [
            ("off", [("summarize", "document", OFF)]),
            ("32KiB", [large, large]),
            # The mcp-host restarts as this block begins: its counters start again at 0
            # and end below where the block started (a reset, as `_deltas` reads it).
            ("32KiB-again", [large]),
        ],
        # The runs on the other mcp-host move its counters, not the matched ones.
        before_last=lambda: (feeding.restart(), other.run(*large)),
    )
    assert blocks[1].persisted > 0 and blocks[1].reads > 0, "nothing spilled: proves nothing"
    end = blocks[-1].last_end

    checks = check_blocks(collector, blocks)

    notes = _notes(checks)
    assert any(
        "read directly from the 1 target(s) Prometheus matches "
        f"(http://{feeding.target}/metrics)" in n
        for n in notes
    ), checks.lines
    assert not any("after it scraped" in n for n in notes), checks.lines
    judged = _judged(checks)
    _every_block_agrees(blocks, checks)
    # The first-party counters moved with every spill (the fault): the spilling blocks'
    # runs get the problem, the `off` block's do not.
    assert set(checks.problems) == {*blocks[1].runs, *blocks[2].runs}, checks.problems

    # The direct read's sums are what Prometheus holds once it has scraped past the end,
    # counter by counter (the other mcp-host's increments left out by both).
    truth = _after_a_scrape(collector, end)
    with collector.connect() as conn:
        direct = read_direct(conn, COUNTERS, collector.selectors, timeout_s=2.0)
    assert direct.sums == truth
    assert truth[PERSISTED] > 0 and all(truth[k] > 0 for k in FIRST_PARTY)
    assert truth[READS] == blocks[-1].reads  # reset: counted from 0 after the restart

    # And the check made by waiting for that scrape judges every block the same way.
    waited = check_blocks(collector, blocks, direct=False)
    assert _judged(waited) == judged
    assert waited.problems == checks.problems
    assert any("after it scraped every matched target" in n for n in _notes(waited))


def test_a_target_the_harness_cannot_reach_falls_back_to_the_scrape_wait(
    feeding: Sim,
    proxy: str,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    """Prometheus scrapes `127.0.0.1:<closed port>` through a proxy that reaches the
    simulator; from the harness that address refuses the connection."""
    hidden = f"127.0.0.1:{free_port()}"
    prom = prometheus_factory([hidden], scrape_interval_s=INTERVAL, labels=LABELS, proxy_url=proxy)
    collector = _collector(prom, hidden)
    blocks = _run_blocks(
        collector,
        feeding,
        [("off", [("summarize", "document", OFF)]), ("32KiB", [("code-review", "large", T32)])],
    )
    assert blocks[1].persisted > 0, "nothing spilled: proves nothing"

    checks = check_blocks(collector, blocks)

    notes = _notes(checks)
    assert any(
        "read from Prometheus after it scraped every matched target past the last run "
        f"(the targets were not read directly: target http://{hidden}/metrics not read: "
        "ConnectionError)" in n
        for n in notes
    ), checks.lines
    assert not any("read directly from" in n for n in notes), checks.lines
    _every_block_agrees(blocks, checks)
    assert set(checks.problems) == set(blocks[1].runs), checks.problems


def _until_dropped(prom: PrometheusServer, target: str, timeout_s: float = 30.0) -> None:
    """Until Prometheus no longer lists `target` (its discovery dropped the pod)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = prom.api("/api/v1/targets")
        assert isinstance(data, dict)
        if not any(t["labels"].get("instance") == target for t in data["activeTargets"]):
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus still lists {target} after {timeout_s}s")


def test_blocks_whose_pods_are_replaced_at_each_switch_are_judged_on_their_own_series(
    tmp_path: Any,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    """As on a platform whose WRC re-renders the mcp-host at every configuration change:
    each block is served by a new mcp-host (here a new simulator), the old one is gone
    at once, before Prometheus may have scraped its last increments. The driver captures
    each block's end at the switch (`capture_end`), so every block agrees with its runs."""
    targets = tmp_path / "targets.json"
    write_file_targets(targets, [])
    prom = prometheus_factory(
        [], scrape_interval_s=2.0, labels=LABELS, discovery=file_targets(targets),
        wait_for_targets=False,
    )  # fmt: skip
    collector = PrometheusCollector(prom.url, selectors='namespace="clerum"', scrape_interval_s=2.0)
    large = ("code-review", "large", T32)
    plan = [("32KiB", [large, large]), ("32KiB-new-pod", [large]), ("off", [("summarize",
            "document", OFF)])]  # fmt: skip
    blocks: list[Block] = []
    stop: list[Callable[[], None]] = []
    try:
        for n, (config, runs) in enumerate(plan):
            server, thread = serve(host="127.0.0.1", port=0)
            stop.append(lambda s=server, t=thread: (s.shutdown(), s.server_close(), t.join(10)))
            sim = Sim(server)
            group = {"targets": [sim.target], "labels": {"namespace": "clerum",
                                                          "pod": f"mcp-host-{n}"}}  # fmt: skip
            write_file_targets(targets, [group])
            if n == 0:
                prom.wait_for_targets_up(timeout_s=30, expected=1)
            # Later blocks run before Prometheus has found their new pod (its discovery
            # applies changes every 5 s): the end read waits for it to catch up.
            block = Block(config, time.time())
            for spec in runs:
                _record_run(block, sim, spec)
            blocks.append(block)
            if n < len(plan) - 1:
                # The driver, before it applies the next configuration.
                capture_end(collector, block)
                assert block.end_series is not None, block.end_notes
                # The switch replaces the pod: it stops, and the discovery drops it.
                stop.pop()()
                write_file_targets(targets, [])
                _until_dropped(prom, sim.target)
        assert blocks[0].persisted > 0 and blocks[1].persisted > 0, "nothing spilled"

        checks = check_blocks(collector, blocks)  # the last pod is still up, as after a stage
    finally:
        for fn in stop:
            fn()

    _every_block_agrees(blocks, checks)
    assert any("judged per series" in n for n in _notes(checks)), checks.lines


def _discovered_from_a_file(
    tmp_path: Any, prometheus_factory: Callable[..., PrometheusServer]
) -> tuple[Path, PrometheusServer, PrometheusCollector]:
    """A Prometheus whose targets come from a file (empty at first), as pods come and go
    through a Kubernetes discovery, and the collector reading it."""
    targets = tmp_path / "targets.json"
    write_file_targets(targets, [])
    prom = prometheus_factory(
        [], scrape_interval_s=INTERVAL, labels=LABELS, discovery=file_targets(targets),
        wait_for_targets=False,
    )  # fmt: skip
    collector = PrometheusCollector(
        prom.url, selectors='namespace="clerum"', scrape_interval_s=INTERVAL
    )
    return targets, prom, collector


def _group(sim: Sim, pod: str) -> dict[str, object]:
    """The target file's group for one pod served by `sim`."""
    return {"targets": [sim.target], "labels": {"namespace": "clerum", "pod": pod}}


def _replaced_after_the_block(
    tmp_path: Any,
    prometheus_factory: Callable[..., PrometheusServer],
    *,
    scraped_first: bool,
) -> tuple[list[Block], BlockChecks]:
    """Two blocks; the first one's pod `mcp-host-0` is replaced by `mcp-host-1` (same
    configuration) after the block's last run, before the driver captures its end at
    the switch. `scraped_first`: Prometheus scraped the old pod past the block's last
    run before it went; otherwise Prometheus never found it (discovered too late)."""
    targets, prom, collector = _discovered_from_a_file(tmp_path, prometheus_factory)
    large = ("code-review", "large", T32)

    old_server, old_thread = serve(host="127.0.0.1", port=0)
    new_server, new_thread = serve(host="127.0.0.1", port=0)
    old, new = Sim(old_server), Sim(new_server)
    try:
        if scraped_first:
            write_file_targets(targets, [_group(old, "mcp-host-0")])
            prom.wait_for_targets_up(timeout_s=30, expected=1)
        first = Block("32KiB", time.time(), pods={"mcp-host-0"})
        for _ in range(2):
            _record_run(first, old, large)
        assert first.persisted > 0, "nothing spilled: proves nothing"
        if scraped_first:
            with collector.connect() as conn:
                collector._wait_for_scrapes(conn, first.last_end, [], 0)
        # The replacement: the old pod goes, the new one (same configuration) serves.
        old_server.shutdown()
        old_server.server_close()
        old_thread.join(10)
        write_file_targets(targets, [_group(new, "mcp-host-1")])
        if scraped_first:
            _until_dropped(prom, old.target)
        prom.wait_for_targets_up(timeout_s=30, expected=1)

        capture_end(collector, first)  # the driver, at the switch to the next block
        assert first.end_series is not None, first.end_notes

        second = Block("off", time.time(), pods={"mcp-host-1"})
        _record_run(second, new, ("summarize", "document", OFF))
        checks = check_blocks(collector, [first, second])
    finally:
        new_server.shutdown()
        new_server.server_close()
        new_thread.join(10)
    return [first, second], checks


def test_a_block_whose_pods_were_replaced_before_its_end_was_read_counts_their_last_scrape(
    tmp_path: Any,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    """The targets Prometheus lists at the switch are the replacement's (their counters
    at 0), not the block's own pod: the end read waits for it to be listed, then reads
    Prometheus after its scrape past the block's last run, which holds the block's pod's
    last values, so the block agrees."""
    blocks, checks = _replaced_after_the_block(tmp_path, prometheus_factory, scraped_first=True)

    _every_block_agrees(blocks, checks)
    assert any(
        "read from Prometheus after a scrape past its last run (Prometheus does not list the "
        "pod(s) mcp-host-0 among its targets (not found yet, or replaced))" in n
        for n in _notes(checks)
    ), checks.lines
    assert blocks[0].end_unscraped == []


def test_a_replaced_pod_prometheus_never_scraped_past_the_block_is_not_called_a_difference(
    tmp_path: Any,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    """Prometheus never saw the block's pod: its end is a lower bound (0), which says
    nothing against the runs' counts. The line says so, not "differ"."""
    blocks, checks = _replaced_after_the_block(tmp_path, prometheus_factory, scraped_first=False)

    first = [line for line in _judged(checks) if line.startswith("block 32KiB (")]
    assert len(first) == 1, checks.lines
    assert first[0].endswith(
        f"sum to persisted {blocks[0].persisted}, reads {blocks[0].reads}: not compared "
        "(Prometheus is a lower bound: pod(s) mcp-host-0 replaced before it scraped them "
        "past the block's last run)"
    ), first
    assert blocks[0].end_unscraped == ["mcp-host-0"]
    assert any(
        line.startswith("block off (") and line.endswith(": agree") for line in _judged(checks)
    ), checks.lines


def test_a_block_that_ends_before_prometheus_found_its_pod_waits_for_it(
    tmp_path: Any,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    """A short block right after a switch: its runs end before Prometheus' discovery
    (it applies changes every 5 s) has found the block's new pod, while it still lists
    the pod the switch replaced, gone. The end read waits until Prometheus lists the
    block's pod and reads that, so the block agrees with its runs: it is never judged
    on no series at all ("+0 ... differ", as `make validate-local` once reported)."""
    targets, prom, collector = _discovered_from_a_file(tmp_path, prometheus_factory)

    old_server, old_thread = serve(host="127.0.0.1", port=0)
    new_server, new_thread = serve(host="127.0.0.1", port=0)
    old, new = Sim(old_server), Sim(new_server)
    try:
        write_file_targets(targets, [_group(old, "mcp-host-0")])
        prom.wait_for_targets_up(timeout_s=30, expected=1)
        first = Block("off", time.time(), pods={"mcp-host-0"})
        _record_run(first, old, ("summarize", "document", OFF))
        capture_end(collector, first)  # the driver, at the switch
        assert first.end_series is not None, first.end_notes
        # The switch replaces the pod: the old one goes at once, Prometheus still lists it.
        old_server.shutdown()
        old_server.server_close()
        old_thread.join(10)
        second = Block("32KiB", time.time(), pods={"mcp-host-1"})
        for _ in range(2):
            _record_run(second, new, ("code-review", "large", T32))
        assert second.persisted > 0, "nothing spilled: proves nothing"
        # The discovery learns of the new pod only after the end read has begun, so
        # Prometheus cannot have found it before.
        late = threading.Timer(2.0, write_file_targets, (targets, [_group(new, "mcp-host-1")]))
        late.start()
        try:
            capture_end(collector, second)  # the driver, at the next switch
        finally:
            late.join()
        assert second.end_series is not None, second.end_notes
        checks = check_blocks(collector, [first, second])
    finally:
        new_server.shutdown()
        new_server.server_close()
        new_thread.join(10)

    _every_block_agrees([first, second], checks)
    assert any("read directly from 1 target(s)" in n for n in second.end_notes), second.end_notes
    assert not any("replaced before its end was read" in n for n in _notes(checks)), checks.lines
