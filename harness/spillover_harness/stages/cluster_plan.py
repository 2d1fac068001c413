"""The order of a cluster stage: configuration blocks, interleaved by round.

A cluster holds one configuration at a time, and switching costs a rollout, so a
cluster stage does not alternate configurations run by run as `sim` does. It runs
per repetition round one block per configuration (every cell of the matrix once),
the configurations rotated by one each round:

    round 1: off, 128KiB, 32KiB     round 2: 128KiB, 32KiB, off     round 3: 32KiB, off, 128KiB

So each configuration meets each position in the stage (a drift of the platform
over time hits all of them alike) and a stage cut short after round k still has
k repetitions of every configuration on every cell. Within a block the cells keep
the plan's order. On `--resume` the runs still to do keep this order.
"""

from __future__ import annotations

from collections.abc import Sequence

from spillover_harness.drivers.base import RunJob


def block_order(jobs: list[RunJob], config_names: Sequence[str]) -> list[RunJob]:
    """Reorder a stage's jobs into configuration blocks (see the module doc).

    `config_names`: the matrix's configurations in its order.
    """
    by_rep: dict[int, dict[str, list[RunJob]]] = {}
    for job in jobs:
        by_rep.setdefault(job.repetition, {}).setdefault(job.config.name, []).append(job)
    names = list(config_names) + sorted({j.config.name for j in jobs} - set(config_names))
    n = len(names)
    ordered: list[RunJob] = []
    for rep in sorted(by_rep):
        offset = (rep - 1) % n if n else 0
        for name in names[offset:] + names[:offset]:
            ordered.extend(by_rep[rep].get(name, []))
    return ordered


def switches(jobs: list[RunJob]) -> int:
    """How many configuration changes running `jobs` in this order takes."""
    count, last = 0, None
    for job in jobs:
        if job.config.name != last:
            count += 1
            last = job.config.name
    return count
