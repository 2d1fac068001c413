"""The change record (change_record.py): what spilloverctl writes, what the operator and
`spilloverctl status` read back, and that a record never describes a generation it was
not written for. The admission policy that enforces who may write one is tried on the
API server in tests/integration/test_audit_trail.py."""

from __future__ import annotations

from typing import Any

import pytest
from spillover_operator.domain.change_record import (
    RECORD_MANAGER,
    ChangeRecord,
    LastChange,
    UnreadableRecord,
    decode,
    last_change,
)
from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION

RECORD = ChangeRecord("alice", 4, "2026-12-02T10:00:00Z", "spilloverctl kill", "INC-123")


def _policy(generation: Any, record: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "spillover", "generation": generation}
    if record is not None:
        meta["annotations"] = {CHANGE_RECORD_ANNOTATION: record}
    return {"metadata": meta}


def test_the_record_starts_with_user_then_generation_as_the_admission_policy_reads_it() -> None:
    text = RECORD.encode()
    assert text.startswith('{"user":"alice","generation":4,')
    assert decode(text) == RECORD


def test_a_user_name_with_quotes_is_escaped_as_the_admission_policy_spells_it() -> None:
    # The policy builds '{"user":"' + username with \ and " escaped + '",'.
    odd = ChangeRecord('o"brien\\x', 2, "t", "spilloverctl set")
    assert odd.encode().startswith('{"user":"o\\"brien\\\\x","generation":2,')
    assert decode(odd.encode()).user == 'o"brien\\x'


def test_non_ascii_is_kept_as_is() -> None:
    text = ChangeRecord("zoë", 2, "t", "spilloverctl kill", "coupure réseau").encode()
    assert '"user":"zoë"' in text
    assert decode(text).reason == "coupure réseau"


@pytest.mark.parametrize(
    "text",
    [
        "INC-99 approved (by cto@prod-bastion, spilloverctl kill, 2026-12-01T00:00:00Z)",
        "[]",
        '{"generation":4,"user":"alice"}',  # user first, or the prefix check means nothing
        '{"user":"alice","generation":4,"user":"cto"}',  # the second user must not win
        '{"user":"","generation":4}',
        '{"user":"alice","generation":"4"}',
        '{"user":"alice","generation":true}',
        '{"user":"alice","generation":0}',
        '{"user":"alice","generation":4,"reason":7}',
        '{"user":"alice","generation":4,"approvedBy":"cto"}',
    ],
)
def test_anything_else_is_unreadable(text: str) -> None:
    with pytest.raises(UnreadableRecord):
        decode(text)


def test_a_record_of_the_current_generation_says_who_when_why_and_with_what() -> None:
    last = last_change(_policy(4, RECORD.encode()))
    assert last.record == RECORD
    assert last.describe() == (
        "generation 4 changed by alice with spilloverctl kill at 2026-12-02T10:00:00Z: INC-123"
    )
    assert last.to_status() == {
        "generation": 4,
        "recorded": True,
        "user": "alice",
        "time": "2026-12-02T10:00:00Z",
        "tool": "spilloverctl kill",
        "reason": "INC-123",
    }


def test_a_record_without_a_reason_still_names_the_user() -> None:
    record = ChangeRecord("alice", 4, "2026-12-02T10:00:00Z", "spilloverctl restore")
    last = last_change(_policy(4, record.encode()))
    assert last.describe() == (
        "generation 4 changed by alice with spilloverctl restore at 2026-12-02T10:00:00Z "
        "(no reason given)"
    )
    assert "reason" not in last.to_status()


def test_a_later_change_without_a_record_is_never_told_under_the_earlier_one() -> None:
    last = last_change(_policy(5, RECORD.encode()))  # someone changed the spec after alice
    assert last.record is None
    text = last.describe()
    assert text.startswith("generation 5 changed without a reason by an unknown user")
    assert "describes generation 4" in text
    assert "alice" not in text and "INC-123" not in text
    assert last.to_status()["recorded"] is False
    assert "user" not in last.to_status() and "reason" not in last.to_status()


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (None, "no change record on the policy"),
        ("INC-99 approved (by cto@prod-bastion)", "the change record is unreadable"),
    ],
)
def test_no_record_or_an_unreadable_one_is_no_reason(record: str | None, why: str) -> None:
    last = last_change(_policy(3, record))
    assert last == LastChange(3, None, last.why_none)
    assert why in last.why_none
    assert "cto" not in last.describe()


def _entry(manager: str, time: str, *annotations: str) -> dict[str, Any]:
    owned = {f"f:{key}": {} for key in annotations}
    return {
        "manager": manager,
        "operation": "Update",
        "time": time,
        "fieldsV1": {"f:metadata": {"f:annotations": owned}, "f:spec": {"f:enabled": {}}},
    }


def test_the_time_shown_is_the_servers_time_of_the_write_that_carried_the_record() -> None:
    # spilloverctl writes the record without a time (its clock may be anything); the
    # server stamps the record manager's managedFields entry with the time of the write.
    written = ChangeRecord("alice", 4, "", "spilloverctl kill", "INC-123")
    assert '"time":null' in written.encode()
    policy = _policy(4, written.encode())
    policy["metadata"]["managedFields"] = [
        _entry("spilloverctl", "2026-12-03T09:00:05Z", "spillover.clerum.io/refresh-recipe-pods"),
        _entry(RECORD_MANAGER, "2026-12-03T09:00:00Z", CHANGE_RECORD_ANNOTATION),
        _entry("kopf", "2026-12-03T09:00:09Z", CHANGE_RECORD_ANNOTATION + "-other"),
    ]
    last = last_change(policy)
    assert last.record is not None and last.record.time == "2026-12-03T09:00:00Z"
    assert "at 2026-12-03T09:00:00Z: INC-123" in last.describe()
    assert last.to_status()["time"] == "2026-12-03T09:00:00Z"


def test_a_record_manager_entry_that_does_not_own_the_record_gives_no_time() -> None:
    written = ChangeRecord("alice", 4, "", "spilloverctl kill", "INC-123")
    policy = _policy(4, written.encode())
    policy["metadata"]["managedFields"] = [_entry(RECORD_MANAGER, "2026-12-03T09:00:00Z")]
    last = last_change(policy)
    assert last.record is not None and last.record.time == ""
    assert " at " not in last.describe()
    assert "time" not in last.to_status()
