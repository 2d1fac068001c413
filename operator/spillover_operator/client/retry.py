"""The one conflict retry: read, plan and write again while the object keeps changing
between our read and our write (HTTP 409 on a resourceVersion precondition)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from spillover_operator.client.errors import Conflict

T = TypeVar("T")

ATTEMPTS = 5


def retry_on_conflict(attempt: Callable[[], T], *, what: str, attempts: int = ATTEMPTS) -> T:
    """Call `attempt` (which must re-read what it writes) until it does not raise
    Conflict; after `attempts` conflicts in a row raise Conflict naming `what`."""
    last: Conflict | None = None
    for _ in range(attempts):
        try:
            return attempt()
        except Conflict as exc:
            last = exc
    assert last is not None
    raise last.with_message(
        f"{what} kept changing while it was being patched ({attempts} conflicts in a row): "
        f"{last.message}"
    )
