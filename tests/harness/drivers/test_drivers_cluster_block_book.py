"""BlockBook's bound on a block's later memory read (drivers/cluster/block_book.py): a
block's figures read after the stage never take a sample of what ran on its pods
afterwards (the reads themselves, on a real Prometheus:
tests/integration/test_block_memory_prometheus.py)."""

from __future__ import annotations

from spillover_harness.cluster.blocks import Block
from spillover_harness.drivers.cluster.block_book import idle_until

NOW = 1000.0


def block(config: str, first_start: float, *pods: str) -> Block:
    return Block(
        config, first_start, runs=[f"{config}-r1"], last_end=first_start + 5, pods=set(pods)
    )


def test_pods_the_switch_replaced_are_idle_until_the_stage_ends() -> None:
    blocks = [block("off", 100, "a"), block("128KiB", 140, "b"), block("32KiB", 180, "c")]
    assert [idle_until(blocks, k, NOW) for k in range(3)] == [NOW, NOW, NOW]


def test_a_pod_kept_across_a_switch_is_the_block_s_until_the_next_block_it_served() -> None:
    blocks = [
        block("off", 100, "a", "b"),
        block("128KiB", 140, "c"),
        block("32KiB", 180, "b"),  # b was kept, and served this block's runs
        block("off", 220, "b"),
    ]
    assert idle_until(blocks, 0, NOW) == 180
    assert idle_until(blocks, 1, NOW) == NOW
    assert idle_until(blocks, 2, NOW) == 220


def test_a_block_no_pod_is_known_to_have_served_is_bounded_by_now() -> None:
    blocks = [block("off", 100), block("128KiB", 140, "a")]
    assert idle_until(blocks, 0, NOW) == NOW
