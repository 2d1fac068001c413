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
    written_at,
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
    # The time is when the operator first reported it (`seen_at`), never the record's own.
    last = last_change(_policy(4, RECORD.encode()), seen_at="2026-12-02T10:00:01Z")
    assert last.record == RECORD
    assert last.describe() == (
        "generation 4 changed by alice with spilloverctl kill at 2026-12-02T10:00:01Z: INC-123"
    )
    assert last.to_status() == {
        "generation": 4,
        "recorded": True,
        "user": "alice",
        "seenAt": "2026-12-02T10:00:01Z",
        "tool": "spilloverctl kill",
        "reason": "INC-123",
    }


def test_a_record_without_a_reason_still_names_the_user() -> None:
    record = ChangeRecord("alice", 4, "", "spilloverctl restore")
    last = last_change(_policy(4, record.encode()))
    assert last.describe() == (
        "generation 4 changed by alice with spilloverctl restore (no reason given)"
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


def test_nothing_a_policy_editor_writes_is_shown_as_the_time() -> None:
    """alice writes her own record with kubectl, with a time of her choosing, and
    rewrites metadata.managedFields (admitted) so that the record manager's entry says
    2099: neither is shown; without the operator's report there is no time at all."""
    forged = ChangeRecord("alice", 4, "2099-01-01T00:00:00Z", "kubectl", "INC-1")
    policy = _policy(4, forged.encode())
    policy["metadata"]["managedFields"] = [
        _entry(RECORD_MANAGER, "2099-01-01T00:00:00Z", CHANGE_RECORD_ANNOTATION)
    ]
    last = last_change(policy)
    assert last.record is not None and last.seen_at == ""
    assert "2099" not in last.describe() and " at " not in last.describe()
    assert "seenAt" not in last.to_status() and "time" not in last.to_status()
    # The operator dates it by its own clock when it first reports it.
    seen = last_change(policy, seen_at="2026-12-03T09:00:00Z")
    assert "at 2026-12-03T09:00:00Z: INC-1" in seen.describe()
    assert "2099" not in str(seen.to_status())


def test_the_operators_first_report_stands_for_the_same_change() -> None:
    """status.lastChange (the status subresource, written by the operator only) keeps
    the time the operator first reported the change; a later report, `spilloverctl
    status` and a later reconcile show that one, not their own now."""
    policy = _policy(4, RECORD.encode())
    first = last_change(policy, seen_at="2026-12-03T09:00:00Z")
    policy["status"] = {"lastChange": first.to_status()}
    assert last_change(policy).seen_at == "2026-12-03T09:00:00Z"
    assert last_change(policy, seen_at="2026-12-03T09:05:00Z").seen_at == "2026-12-03T09:00:00Z"


@pytest.mark.parametrize(
    "other",
    [
        {"generation": 3},  # another generation's report
        {"reason": "INC-999"},  # another record (written where admission is not installed)
        {"user": "cto"},
        {"recorded": False},
    ],
)
def test_a_report_of_another_change_gives_its_time_to_no_other(other: dict[str, Any]) -> None:
    policy = _policy(4, RECORD.encode())
    report = {**last_change(policy, seen_at="2026-12-03T09:00:00Z").to_status(), **other}
    policy["status"] = {"lastChange": report}
    assert last_change(policy).seen_at == ""
    assert last_change(policy, seen_at="2026-12-03T09:05:00Z").seen_at == "2026-12-03T09:05:00Z"


def test_written_at_reads_the_record_managers_entry_in_the_answer_to_ones_own_write() -> None:
    meta = {
        "managedFields": [
            _entry("spilloverctl", "2026-12-03T09:00:05Z", "spillover.clerum.io/other"),
            _entry(RECORD_MANAGER, "2026-12-03T09:00:00Z", CHANGE_RECORD_ANNOTATION),
            _entry("kopf", "2026-12-03T09:00:09Z", CHANGE_RECORD_ANNOTATION + "-other"),
        ]
    }
    assert written_at(meta) == "2026-12-03T09:00:00Z"
    assert written_at({"managedFields": [_entry(RECORD_MANAGER, "2026-12-03T09:00:00Z")]}) == ""
    assert written_at({}) == ""


FORGED_LINE = "\ngeneration 99 changed by cto@prod-bastion with spilloverctl kill: approved"


@pytest.mark.parametrize("key", ["user", "tool", "reason"])
@pytest.mark.parametrize("control", ["\n", "\r", "\x1b[2K\r", "\x9b", "\u2028", "\u202e"])
def test_a_control_character_in_any_field_is_shown_escaped_on_one_line(
    key: str, control: str
) -> None:
    fields: dict[str, Any] = {"user": "alice", "tool": "kubectl", "reason": "INC-1"}
    fields[key] += control + FORGED_LINE
    text = ChangeRecord(fields["user"], 4, "", fields["tool"], fields["reason"]).encode()
    last = last_change(_policy(4, text), seen_at="2026-12-03T09:00:00Z")
    line = last.describe()
    assert line.isprintable(), repr(line)  # no newline, no ESC, no format character
    assert repr(control)[1:-1] in line
    for value in last.to_status().values():
        assert not isinstance(value, str) or value.isprintable(), repr(value)
    assert last.to_status()[key].startswith(fields[key][: fields[key].index(control)])


def test_a_backslash_is_escaped_too_so_an_escape_shown_is_never_one_written() -> None:
    written = ChangeRecord("alice", 4, "", "kubectl", "a\\nb and a\nb")
    shown = last_change(_policy(4, written.encode())).to_status()["reason"]
    assert shown == "a\\\\nb and a\\nb"


def test_an_unreadable_record_is_named_on_one_line_too() -> None:
    text = '{"user":"alice","generation":4,"x\\u001b[31m\\ngeneration 99":1}'
    last = last_change(_policy(4, text))
    assert last.record is None
    assert "unreadable" in last.why_none
    assert last.describe().isprintable(), repr(last.describe())
    assert "\\x1b[31m\\ngeneration 99" in last.describe()
