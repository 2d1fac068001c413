"""The configuration blocks a cluster stage has run (cluster/blocks.py: their counters are
read after the stage): each block's runs, the pods that served them, its Prometheus
counters at its end, its mcp-host memory and its kubelet sampler.

A block's memory is read in two steps, so that no switch waits for a scrape: at its end
(`capture_memory`) what must be read while its pods exist (Prometheus' samples by then,
the pods' restart counts), and after the stage (`finish_memory`) what Prometheus
scraped of its pods after its end, where it had nothing by then, and the kubelet
Summary's samples beside Prometheus' figures."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from spillover_operator.client import ClientError, Connection, list_pods

from spillover_harness.cluster.blocks import Block, capture_end
from spillover_harness.cluster.kubelet_summary import SummarySampler, block_edges, combine_peak
from spillover_harness.collectors.memory import (
    BlockMemory,
    ContainerRestarts,
    MemoryWindow,
    container_restarts,
    read_block_memory,
    read_later,
    restarts_between,
)
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.drivers.base import RunJob
from spillover_harness.profile import MemoryQueries, Profile

# How long a block waits, before its runs, for the kubelet's first figure of new mcp-host
# pods (its first housekeeping of a container comes about 10 s after the start).
MEASURED_WAIT_S = 30.0


class BlockBook:
    """The blocks run so far, in order; runs of one block may end together (a lock)."""

    def __init__(self, profile: Profile, cluster: Connection, prometheus: PrometheusCollector):
        self.profile = profile
        self.cluster = cluster
        self.prometheus = prometheus
        self.blocks: list[Block] = []
        self._lock = threading.Lock()

    def begin(self, job: RunJob) -> None:
        """Before a run: a new block when its configuration is not the last block's (the
        previous block's kubelet sampler stops there)."""
        with self._lock:
            if self.blocks and self.blocks[-1].config == job.config.name:
                return
            block = Block(job.config.name, time.time())
            self.blocks.append(block)
            previous = self.blocks[-2].sampler if len(self.blocks) > 1 else None
            if self.profile.memory.source != "none":
                block.sampler = SummarySampler(
                    self.cluster, self.profile.pods.mcp_host.selector, self._mcp_host_container()
                ).start()
                # the switch may have made new pods: their working set at the block's
                # start is the idle pod's only once the kubelet has measured them
                block.sampler.wait_measured(MEASURED_WAIT_S)
                block.first_start = time.time()
        if previous is not None:
            previous.stop()  # its memory is read at the switch; no later sample is its
        if self.profile.memory.restarts_from == "pod-status":
            block.restarts_before = self._container_restarts()

    def add(
        self,
        job: RunJob,
        persisted: int | None,
        reads: int | None,
        ended: float,
        pods: Sequence[str] = (),
    ) -> None:
        """After a run: its counts, end and serving pods join the current block."""
        with self._lock:
            if not self.blocks:
                return
            block = self.blocks[-1]
            block.runs.append(job.run_id)
            block.pods.update(pods)
            block.last_end = max(block.last_end, ended)
            if persisted is None or reads is None:
                block.complete = False
            else:
                block.persisted += persisted
                block.reads += reads

    def capture_end(self) -> None:
        """Before a switch: the finished block's counters, while its pods still exist
        (the switch may replace them; blocks.capture_end)."""
        with self._lock:
            block = self.blocks[-1] if self.blocks else None
        if block is not None and block.end_series is None:
            capture_end(self.prometheus, block)
        if block is not None:
            self.capture_memory(block)

    def capture_memory(self, block: Block) -> None:
        """The block's mcp-host memory, restarts and OOM kills (collectors/memory.py),
        once, at its end: before the switch, or after the stage for the last block.
        Prometheus is read as it stands (a figure it has no sample of yet is left for
        `finish_memory`), the kubelet sampler stops, and the restarts are read from the
        pods' status while the pods that served the block still exist."""
        if block.memory is not None or not block.runs:
            return
        queries = self._queries()
        memory = read_block_memory(self.prometheus, queries, self._window(block))
        if block.sampler is not None:
            block.sampler.stop()
        if queries.restarts_from == "pod-status" and queries.source != "none":
            self._status_restarts(memory, block)
        block.memory = memory

    def finish_memory(self) -> None:
        """After the stage, before the records get their figures: each captured block's
        figures Prometheus had no sample of at its end, from its samples after it
        (collectors/memory.read_later, bounded by `idle_until`), then the kubelet
        Summary's peak and edges beside Prometheus' (once per block)."""
        with self._lock:
            blocks = list(self.blocks)
        now = time.time()
        for index, block in enumerate(blocks):
            memory = block.memory
            if memory is None or block.memory_finished:
                continue
            until = idle_until(blocks, index, now)
            read_later(self.prometheus, self._queries(), memory, self._window(block), until=until)
            if block.sampler is not None:
                self._finer_peak(memory, block)
                self._kubelet_edges(memory, block)
            block.memory_finished = True

    def _status_restarts(self, memory: BlockMemory, block: Block) -> None:
        """memory.restarts_from pod-status: the block's restarts and OOM kills from the
        mcp-host containers' status at its start and now."""
        after = self._container_restarts()
        if block.restarts_before is None or after is None:
            memory.notes.append("memory: restarts not read (the mcp-host pods' status)")
            return
        memory.restarts, memory.oom_kills = restarts_between(
            block.restarts_before,
            after,
            sorted(block.pods),
            block.first_start,
            block.last_end,
        )

    def _queries(self) -> MemoryQueries:
        """The profile's memory queries; without restarts and OOM kills when the pods'
        status gives them (memory.restarts_from: pod-status)."""
        queries = self.profile.memory
        if queries.restarts_from == "pod-status":
            queries = queries.model_copy(update={"restarts": None, "oom_kills": None})
        return queries

    def _window(self, block: Block) -> MemoryWindow:
        """What the block's memory queries are about: the pods that served its runs."""
        return MemoryWindow(
            self.profile.namespace,
            tuple(sorted(block.pods)),
            self._mcp_host_container(),
            block.first_start,
            block.last_end,
        )

    def _finer_peak(self, memory: BlockMemory, block: Block) -> None:
        """The block's peak: the higher of Prometheus' (a lower bound at its scrape
        interval) and the kubelet Summary's samples of the block's pods (a lower bound at
        the sampler's step), naming the source; a note when no Summary could be read."""
        sampler = block.sampler
        assert sampler is not None
        peak = combine_peak(
            memory.peak_bytes,
            self.prometheus.scrape_interval_s,
            sampler.peaks,
            block.pods,
            sampler.step_s,
        )
        memory.peak_bytes, memory.peak_source = peak.peak_bytes, peak.source
        if not sampler.samples:
            why = "; ".join(f"{node}: {reason}" for node, reason in sorted(sampler.refused.items()))
            memory.notes.append(
                "memory: the kubelet Summary was not read"
                + (f" ({why[:200]})" if why else "")
                + "; the peak is Prometheus' alone, a lower bound at its scrape interval"
            )

    @staticmethod
    def _kubelet_edges(memory: BlockMemory, block: Block) -> None:
        """The working set at the block's start and end from the kubelet Summary's
        first and last figures of its pods, where Prometheus had no sample of them there
        (new pods, a short block): both from the one source, or neither."""
        sampler = block.sampler
        assert sampler is not None
        if memory.start_bytes is not None and memory.end_bytes is not None:
            return
        start, end = block_edges(
            sampler.first,
            sampler.last,
            block.pods,
            block.first_start,
            block.last_end,
            sampler.step_s,
        )
        if start is not None and end is not None:
            memory.start_bytes, memory.end_bytes = start, end
            memory.notes.append(
                "memory: the working set at the block's start and end is the kubelet "
                "Summary's (Prometheus had no sample of its pods there)"
            )

    def close(self) -> None:
        """Stop every block's kubelet sampler still running (a stage that ended early)."""
        with self._lock:
            samplers = [b.sampler for b in self.blocks if b.sampler is not None]
        for sampler in samplers:
            sampler.stop()

    def _mcp_host_container(self) -> str:
        return self.profile.pods.mcp_host.container or "mcp-host"

    def _container_restarts(self) -> dict[str, ContainerRestarts] | None:
        """The mcp-host containers' restart counts now (memory.restarts_from
        pod-status); None when the pods cannot be listed (never stops a stage)."""
        try:
            pods = list_pods(self.cluster, self.profile.pods.mcp_host.selector)
        except ClientError:
            return None
        return container_restarts(pods, self._mcp_host_container())


def idle_until(blocks: Sequence[Block], index: int, now: float) -> float:
    """Until when only block `index`'s runs are known to have run on the pods that served
    it: the first start of a later block one of those pods served too (a pod kept across
    a switch), else `now` (the stage has ended; a later instant has no samples yet).
    Prometheus' samples of the pods past it are not the block's."""
    pods = blocks[index].pods
    later = [b.first_start for b in blocks[index + 1 :] if b.pods & pods]
    return min([*later, now])
