"""How API failures become the library's error types, and their messages: each names
the object, the verb, the namespace and the connection, and says what to do."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from spillover_operator.client import (
    ApiError,
    ApiUnavailable,
    ClientError,
    Conflict,
    Connection,
    Forbidden,
    NotFound,
    NotServed,
    Rejected,
    TimedOut,
    Unauthorized,
)
from spillover_operator.client._api import api_call, api_error, decode

CONN = Connection(
    ApiClient(Configuration()),
    "clerum",
    "test",
    kubeconfig="/k/config",
    context="ctx",
    server="https://api:6443",
)
WHAT = "SpilloverPolicy 'spillover'"
RESOURCE = "spilloverpolicies.spillover.clerum.io"


def _exc(status: int, message: str = "", *, name: str | None = None) -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    body: dict[str, object] = {"kind": "Status", "message": message}
    if name is not None:
        body["details"] = {"name": name}
    exc.body = json.dumps(body)
    return exc


def test_a_missing_object_is_not_found_naming_it_and_the_namespace() -> None:
    err = api_error(CONN, _exc(404, "not found", name="spillover"), "get", RESOURCE, WHAT)
    assert type(err) is NotFound and err.status == 404
    assert err.message == (
        "SpilloverPolicy 'spillover' not found in namespace 'clerum' (context 'ctx' in "
        "kubeconfig '/k/config' (API server https://api:6443)). Is the namespace right (-n)?"
    )


def test_a_resource_the_server_does_not_serve_points_at_the_crd() -> None:
    err = api_error(CONN, _exc(404, "the server could not find it"), "get", RESOURCE, WHAT)
    assert isinstance(err, NotServed) and isinstance(err, NotFound)
    assert f"the API server does not serve {RESOURCE}" in err.message
    assert "Is the SpilloverPolicy CRD installed" in err.message


def test_forbidden_names_the_verb_resource_namespace_and_fix() -> None:
    err = api_error(CONN, _exc(403, "no RBAC"), "patch", "deployments.apps", "Deployment 'wrc'")
    assert isinstance(err, Forbidden)
    assert "may not patch deployments.apps in namespace 'clerum' (no RBAC)" in err.message
    assert "Grant that permission (Role/RoleBinding)" in err.message
    assert "context 'ctx' in kubeconfig '/k/config'" in err.message


@pytest.mark.parametrize(
    ("status", "kind", "needle"),
    [
        (401, Unauthorized, "rejected the credentials"),
        (409, Conflict, "changed while we wrote it"),
        (422, Rejected, "rejected the patch of SpilloverPolicy 'spillover': bad value"),
        (400, Rejected, "rejected the patch"),
        (500, ApiError, "API error 500 Reason on patch"),
    ],
)
def test_other_statuses(status: int, kind: type[ApiError], needle: str) -> None:
    err = api_error(CONN, _exc(status, "bad value"), "patch", RESOURCE, WHAT)
    assert type(err) is kind and err.status == status
    assert needle in err.message


def test_the_body_is_never_quoted_whole() -> None:
    exc = ApiException(status=500, reason="Internal")
    exc.body = "tool output the server echoed"  # not a Status object
    err = api_error(CONN, exc, "get", RESOURCE, WHAT)
    assert "tool output" not in err.message
    assert "Internal" in err.message


def test_network_failures_are_api_unavailable_naming_the_connection() -> None:
    with pytest.raises(ApiUnavailable) as info, api_call(CONN, "get", RESOURCE, WHAT):
        raise ConnectionRefusedError(111, "Connection refused")
    assert info.value.message.startswith("cannot reach the API server using context 'ctx'")


def test_decode_wants_a_json_object() -> None:
    assert decode(SimpleNamespace(data=b'{"a": 1}')) == {"a": 1}
    with pytest.raises(ApiUnavailable, match="not JSON"):
        decode(SimpleNamespace(data=b"<html>"))
    with pytest.raises(ApiUnavailable, match="not an object"):
        decode(SimpleNamespace(data=b"[1]"))


def test_with_message_keeps_the_type_and_details() -> None:
    err = TimedOut("late", pending=["PENDING: x"])
    told = err.with_message("later")
    assert type(told) is TimedOut and told.pending == ["PENDING: x"]
    assert (told.message, str(told)) == ("later", "later")
    assert err.message == "late"
    forbidden = Forbidden("no", status=403).with_message("still no")
    assert isinstance(forbidden, ClientError) and forbidden.status == 403


def test_an_admission_refusal_is_forbidden_but_not_blamed_on_rbac() -> None:
    server = (
        'spilloverpolicies.spillover.clerum.io "spillover" is forbidden: '
        "ValidatingAdmissionPolicy 'spillover-change-record' with binding "
        "'spillover-change-record' denied request: a change record must name the user"
    )
    err = api_error(CONN, _exc(403, server), "patch", RESOURCE, WHAT)
    assert isinstance(err, Forbidden) and err.status == 403
    assert err.message.startswith(
        "refused by admission: the patch of SpilloverPolicy 'spillover' in namespace 'clerum'"
    )
    assert err.message.endswith("denied request: a change record must name the user")
    assert "Grant that permission" not in err.message
    rbac = api_error(CONN, _exc(403, "cannot patch resource"), "patch", RESOURCE, WHAT)
    assert "Grant that permission" in rbac.message
