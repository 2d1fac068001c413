"""The simulator's model of the agent: the parameters its simulated decision follows from.

The defaults are the simulator's fixed figures (sim/agent.py, sim/prompt.py,
sim/store.py), so a matrix without a `sim_model:` section runs with them. A matrix
sets any of them in its `sim_model:` section (validated against `PARAMETERS`' bounds,
docs/simulator.md §1.5), and `spillover-harness sensitivity` varies each across its
`sweep` values.

| parameter | default | what it models |
|---|---|---|
| full_read_limit | 65536 | a spilled file up to this size is read back whole; above it, windows |
| window_before | 2048 | bytes read before each hunk of a large spilled file |
| window_after | 6144 | bytes read after each hunk |
| wide_window | 24576 | margin of the second, wider read around a hunk not found |
| lazy_reader_p | 0.2 | share of summarize runs whose agent stops reading early |
| lazy_read_fraction | 0.5 | how much of a spilled document a lazy reader reads |
| context_window_tokens | 200000 | a prompt above it fails the call and the step |
| max_iterations | 25 | LLM calls a step may make before it fails |
| bytes_per_token | 4.0 | bytes of the request body the "LLM" counts as one token |
| head_bytes | 1024 | bytes of a spilled result's start its summary shows |
| tail_bytes | 1024 | bytes of a spilled result's end its summary shows |
| structure_hint_depth | 2 | object/array levels the summary's structure hint opens |
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Final

__all__ = ["PARAMETERS", "ModelParameter", "SimModel", "parameter"]


@dataclass(frozen=True)
class SimModel:
    """How the simulated agent reads and what the simulated LLM allows (today's values)."""

    full_read_limit: int = 64 * 1024
    window_before: int = 2 * 1024
    window_after: int = 6 * 1024
    wide_window: int = 24 * 1024
    lazy_reader_p: float = 0.2
    lazy_read_fraction: float = 0.5
    context_window_tokens: int = 200_000
    max_iterations: int = 25
    bytes_per_token: float = 4.0
    head_bytes: int = 1024
    tail_bytes: int = 1024
    structure_hint_depth: int = 2

    def with_value(self, name: str, value: float) -> SimModel:
        """This model with one parameter changed (the type of the parameter kept)."""
        changes: dict[str, Any] = {name: parameter(name).typed(value)}
        return replace(self, **changes)

    def changed(self) -> dict[str, float]:
        """The parameters that differ from the defaults (what a report names)."""
        default = SimModel()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        }


@dataclass(frozen=True)
class ModelParameter:
    """One parameter: its meaning, unit, valid bounds and the values a sensitivity study tries."""

    name: str
    unit: str
    low: float
    high: float
    sweep: tuple[float, ...]
    meaning: str

    @property
    def integer(self) -> bool:
        return isinstance(getattr(SimModel(), self.name), int)

    @property
    def default(self) -> float:
        value: float = getattr(SimModel(), self.name)
        return value

    def typed(self, value: float) -> float:
        return int(value) if self.integer else float(value)


PARAMETERS: Final[tuple[ModelParameter, ...]] = (
    ModelParameter(
        "full_read_limit",
        "bytes",
        1024,
        16 * 1024 * 1024,
        (8192, 16384, 32768, 131072, 262144),
        "a spilled file up to this size is read back whole; a larger one only in "
        "windows around the diff's hunks",
    ),
    ModelParameter(
        "window_before",
        "bytes",
        0,
        1024 * 1024,
        (0, 512, 1024, 4096, 8192),
        "bytes the code reviewer reads before each hunk of a large spilled file",
    ),
    ModelParameter(
        "window_after",
        "bytes",
        0,
        1024 * 1024,
        (512, 1024, 2048, 3072, 12288, 24576),
        "bytes the code reviewer reads after each hunk (the planted defect sits ~20 "
        "lines below the last hunk)",
    ),
    ModelParameter(
        "wide_window",
        "bytes",
        0,
        1024 * 1024,
        (0, 4096, 8192, 49152, 98304),
        "margin of the second, wider read around a hunk the first windows missed",
    ),
    ModelParameter(
        "lazy_reader_p",
        "share of runs",
        0.0,
        1.0,
        (0.0, 0.1, 0.3, 0.5, 1.0),
        "share of summarize runs whose agent, seeing only a summary, stops reading early",
    ),
    ModelParameter(
        "lazy_read_fraction",
        "share of the document",
        0.0,
        1.0,
        (0.25, 0.75, 0.9, 1.0),
        "how much of a spilled document a lazy reader reads before it stops",
    ),
    ModelParameter(
        "context_window_tokens",
        "tokens",
        1000,
        10_000_000,
        (32_000, 64_000, 100_000, 128_000, 400_000, 1_000_000),
        "a prompt above this many tokens fails the LLM call and the step",
    ),
    ModelParameter(
        "max_iterations",
        "LLM calls",
        1,
        1000,
        (8, 10, 12, 15, 20, 50),
        "LLM calls a step may make; the last one still asking for tools fails the step",
    ),
    ModelParameter(
        "bytes_per_token",
        "bytes per token",
        1.0,
        16.0,
        (2.0, 2.5, 3.0, 3.5, 5.0, 6.0),
        "bytes of the request body the simulated LLM counts as one token (input and "
        "output tokens, the context window)",
    ),
    ModelParameter(
        "head_bytes",
        "bytes",
        0,
        65536,
        (0, 256, 4096, 16384),
        "bytes of a spilled result's serialized start shown in its summary (`head`)",
    ),
    ModelParameter(
        "tail_bytes",
        "bytes",
        0,
        65536,
        (0, 256, 4096, 16384),
        "bytes of a spilled result's serialized end shown in its summary (`tail`)",
    ),
    ModelParameter(
        "structure_hint_depth",
        "levels",
        0,
        8,
        (0, 1, 4),
        "object/array levels the summary's structure hint opens (0: `object(2 keys)` "
        "only, no field sizes or line counts)",
    ),
)

_BY_NAME: Final = {p.name: p for p in PARAMETERS}


def parameter(name: str) -> ModelParameter:
    """The parameter called `name`; KeyError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(
            f"unknown simulator model parameter {name!r} (known: {', '.join(_BY_NAME)})"
        ) from None
