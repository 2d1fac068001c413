"""The one conflict retry (its use on a real API server: tests/integration/test_client_api.py)."""

from __future__ import annotations

import pytest
from spillover_operator.client import Conflict, Forbidden, retry_on_conflict


def test_retries_while_conflicting_then_returns() -> None:
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Conflict("changed", status=409)
        return "done"

    assert retry_on_conflict(attempt, what="Deployment ns/wrc") == "done"
    assert len(calls) == 3


def test_gives_up_after_the_attempts_naming_the_object() -> None:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise Conflict("Deployment 'wrc' changed while we wrote it", status=409)

    with pytest.raises(Conflict) as info:
        retry_on_conflict(attempt, what="Deployment ns/wrc", attempts=4)
    assert len(calls) == 4
    assert info.value.message.startswith(
        "Deployment ns/wrc kept changing while it was being patched (4 conflicts in a row)"
    )


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise Forbidden("no", status=403)

    with pytest.raises(Forbidden):
        retry_on_conflict(attempt, what="x")
    assert len(calls) == 1
