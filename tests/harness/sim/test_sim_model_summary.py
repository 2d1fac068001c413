"""The simulator's token ratio and spilled-result summary as model parameters
(`bytes_per_token`, `head_bytes`, `tail_bytes`, `structure_hint_depth`,
docs/simulator.md §1.5): each reaches the step it is set for, the defaults are the
fixed figures they replace."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from spillover_harness.fixtures import build_fixtures
from spillover_harness.plan.sim_model import SimModel, parameter
from spillover_harness.sim.config import SpilloverConfig
from spillover_harness.sim.step import run_step
from spillover_harness.sim.steprun import StepLimits, StepRun
from spillover_harness.sim.store import SpilloverStore, serialize_result, structure_hint
from spillover_operator.domain.model import THRESHOLD_VAR

SEED = 20261130
KIB32 = {THRESHOLD_VAR: "32768"}


def store(threshold: int = 4096, head_bytes: int = 1024, tail_bytes: int = 1024) -> SpilloverStore:
    return SpilloverStore(
        SpilloverConfig(True, threshold, 16_777_216),
        "review",
        "exec-1",
        head_bytes=head_bytes,
        tail_bytes=tail_bytes,
    )


def sized(n: int) -> dict[str, str]:
    """A result whose serialization is exactly n bytes."""
    result = {"data": "x" * (n - len(serialize_result({"data": ""})))}
    assert len(serialize_result(result).encode("utf-8")) == n
    return result


def review(tmp: Path, model: SimModel, name: str = "medium") -> StepRun:
    fixture = build_fixtures(SEED).get("code-review", name)
    return run_step(
        fixture=fixture,
        env=KIB32,
        seed=SEED,
        repetition=1,
        run_id="run-1",
        output_dir=tmp / f"{name}-{model.bytes_per_token}-{model.head_bytes}",
        model=model,
        limits=StepLimits.from_model(model),
        capture_prompts=True,
    )


def spilled_summaries(run: StepRun) -> list[dict[str, object]]:
    """The spillover summaries the last prompt carries."""
    body = json.loads(run.prompts[-1])
    found = []
    for message in body["messages"]:
        if message.get("role") == "tool" and '"spillover":' in message["content"]:
            found.append(json.loads(message["content"])["spillover"])
    return found


def test_the_defaults_are_the_fixed_figures_they_replace() -> None:
    model = SimModel()
    assert (model.bytes_per_token, model.head_bytes, model.tail_bytes) == (4.0, 1024, 1024)
    assert model.structure_hint_depth == 2
    assert not parameter("bytes_per_token").integer
    assert parameter("head_bytes").integer and parameter("structure_hint_depth").integer


def test_bytes_per_token_sets_what_a_prompt_costs(tmp_path: Path) -> None:
    four = review(tmp_path, SimModel())
    fewer = review(tmp_path, SimModel(bytes_per_token=2.5))
    # The prompts are the same bytes (the agent does not read the token count) ...
    assert fewer.prompt_sizes == four.prompt_sizes
    assert four.input_tokens == sum(math.ceil(len(b) / 4) for b in four.prompts)
    # ... but 2.5 bytes a token makes each of them cost more tokens.
    assert fewer.input_tokens == sum(math.ceil(len(b) / 2.5) for b in fewer.prompts)
    assert fewer.input_tokens > four.input_tokens
    assert fewer.output_tokens > four.output_tokens


def test_bytes_per_token_moves_the_context_window(tmp_path: Path) -> None:
    """Prompts that fit a 100,000-token window at 4 bytes a token overflow it at 2."""
    fits = review(tmp_path, SimModel(context_window_tokens=100_000), "large")
    overflows = review(
        tmp_path, SimModel(context_window_tokens=100_000, bytes_per_token=2.0), "large"
    )
    assert fits.outcome == "succeeded"
    assert math.ceil(max(fits.prompt_sizes) / 2) > 100_000
    assert overflows.outcome == "failed"
    assert "context window exceeded" in (overflows.error or "")
    assert overflows.iterations <= fits.iterations


@pytest.mark.parametrize(("head", "tail"), [(0, 0), (256, 4096), (16384, 8)])
def test_head_and_tail_bytes_set_the_summary_preview(head: int, tail: int) -> None:
    s = store(head_bytes=head, tail_bytes=tail)
    result = sized(10_000)
    data = serialize_result(result).encode("utf-8")
    summary = json.loads(s.handle_result("read_file", "call_1", result).content)["spillover"]
    assert summary["head"] == data[: min(head, len(data))].decode("utf-8")
    assert summary["tail"] == data[len(data) - min(tail, len(data)) :].decode("utf-8")


def test_a_tail_longer_than_the_result_shows_it_whole() -> None:
    s = store(threshold=4096, tail_bytes=65536)
    result = sized(5000)
    summary = json.loads(s.handle_result("read_file", "call_1", result).content)["spillover"]
    assert summary["tail"] == serialize_result(result)


def test_structure_hint_depth_opens_that_many_levels() -> None:
    value = {"path": "a.py", "content": "x\ny", "meta": {"inner": {"deep": [1]}}}
    assert structure_hint(value, max_depth=0) == "object(3 keys)"
    assert structure_hint(value, max_depth=1) == (
        "object{path: string(4 B), content: string(3 B, 2 lines), meta: object(1 keys)}"
    )
    assert structure_hint(value) == structure_hint(value, max_depth=2)
    assert "meta: object{inner: object(1 keys)}" in structure_hint(value)
    assert "deep: array[1] of number" in structure_hint(value, max_depth=4)


def test_a_summary_without_line_counts_changes_how_the_reviewer_reads(tmp_path: Path) -> None:
    """Depth 0 hides the file's line count: the reviewer cannot place the hunks and
    reads the large file whole instead of in windows, at a higher token cost."""
    windows = review(tmp_path, SimModel(), "large")
    whole = review(tmp_path, SimModel(structure_hint_depth=0), "large")
    assert all("lines)" in str(s["structure"]) for s in spilled_summaries(windows))
    assert all(s["structure"] == "object(2 keys)" for s in spilled_summaries(whole))
    assert whole.input_tokens > windows.input_tokens
