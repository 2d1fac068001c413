"""What kill / restore / set write on the policy besides the spec (`change._annotations`):
the change record with every spec change (or its removal, never an older record kept by
spilloverctl), the legacy free-text reason removed, and a refresh token that claims no
identity. Who the record names, and the admission policy, are tried on the API server
in tests/integration/test_audit_trail.py."""

from __future__ import annotations

from spillover_operator.cli.change import Options, _annotations
from spillover_operator.domain.change_record import ChangeRecord, decode
from spillover_operator.domain.constants import (
    CHANGE_RECORD_ANNOTATION,
    LEGACY_CHANGE_REASON_ANNOTATION,
    REFRESH_REQUEST_ANNOTATION,
)

RECORD = ChangeRecord("alice", 5, "2026-12-02T10:00:00Z", "spilloverctl kill", "INC-1")


def test_a_spec_change_carries_its_record_and_drops_the_legacy_reason() -> None:
    written = _annotations(Options(reason="INC-1"), RECORD, spec_changes=True, refresh_request=True)
    assert decode(written[CHANGE_RECORD_ANNOTATION]) == RECORD
    assert written[LEGACY_CHANGE_REASON_ANNOTATION] is None
    assert REFRESH_REQUEST_ANNOTATION not in written


def test_a_spec_change_without_a_record_removes_any_older_one() -> None:
    written = _annotations(Options(), None, spec_changes=True, refresh_request=True)
    assert written == {CHANGE_RECORD_ANNOTATION: None, LEGACY_CHANGE_REASON_ANNOTATION: None}


def test_no_spec_change_writes_no_record_even_with_a_reason() -> None:
    """The record would describe a change someone else made (admission refuses it too)."""
    assert (
        _annotations(Options(reason="INC-1"), None, spec_changes=False, refresh_request=True) == {}
    )


def test_the_refresh_token_is_unique_and_names_nobody() -> None:
    options = Options(refresh_recipe_pods=True)
    first = _annotations(options, None, spec_changes=False, refresh_request=True)
    second = _annotations(options, None, spec_changes=False, refresh_request=True)
    assert first[REFRESH_REQUEST_ANNOTATION] != second[REFRESH_REQUEST_ANNOTATION]
    assert "@" not in first[REFRESH_REQUEST_ANNOTATION]
    # --direct refreshes itself and kill asks in a write of its own: no token here.
    assert _annotations(options, None, spec_changes=False, refresh_request=False) == {}
