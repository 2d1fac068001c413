"""The audit trail of issue 19 (item 2) on the local control plane: who changed a
SpilloverPolicy is the user the API server authenticated, enforced by the shipped
admission policy spillover-change-record; a change without a record is reported as
such, never under an earlier person's reason; a change made while the operator was
down is a policy change, not drift. Issue 39 (item 3): a record is shown only as
written and on one line (a newline or ESC in any field escaped, in `spilloverctl
status`, status.lastChange and the Events), and its time is never one a policy editor
can write (the record's own, metadata.managedFields): the operator's first report of
the change, else none.

"alice" is a real user here: a client certificate with CN alice (not impersonation),
allowed to get, list, create and patch SpilloverPolicies in the test's namespace and
nothing else. She runs spilloverctl in-process with `USER=cto`. The admission policy
comes from `kubectl kustomize manifests/overlays/dev`, bound to the test's namespace
only (the control plane is shared by every test)."""

from __future__ import annotations

import datetime
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admission_helpers import enforced, shipped_for_namespace
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    container_manifest,
    create_object,
    current,
    deployment_manifest,
    env_map,
    model,
    policy_manifest,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client
from kubernetes.client import ApiException
from kustomize_build import OVERLAYS, build, kubectl
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.domain.change_record import (
    RECORD_MANAGER,
    ChangeRecord,
    decode,
    last_change,
    written_at,
)
from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

VAP = "spillover-change-record"
WRC = "wrc"


@pytest.fixture(scope="module")
def shipped() -> list[dict[str, Any]]:
    return build(OVERLAYS / "dev")


@pytest.fixture
def admission(
    admin: client.ApiClient, namespace: str, shipped: list[dict[str, Any]]
) -> Iterator[None]:
    """The shipped spillover-change-record policy, its binding narrowed to this
    namespace (and both renamed after it); waits until it is enforced."""
    vap, binding = shipped_for_namespace(shipped, VAP, namespace)
    # Loaded asynchronously: probe with a dry-run create carrying a forged record.
    probe = policy_manifest(namespace, {"enabled": True, "target": {"deployment": WRC}}, "probe")
    forged = ChangeRecord("cto", 1, "t", "spilloverctl kill", "probe").encode()
    probe["metadata"]["annotations"] = {CHANGE_RECORD_ANNOTATION: forged}

    def refused() -> bool:
        try:
            client.CustomObjectsApi(admin).create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, probe, dry_run="All"
            )
        except ApiException as exc:
            return exc.status == 403
        return False

    with enforced(admin, vap, binding, refused):
        yield


@pytest.fixture
def alice(control_plane: LocalCluster, admin: client.ApiClient, namespace: str) -> Path:
    """alice's kubeconfig: she may get, list, create and patch SpilloverPolicies here."""
    rbac = client.RbacAuthorizationV1Api(admin)
    role = {
        "metadata": {"name": "alice"},
        "rules": [
            {
                "apiGroups": [GROUP],
                "resources": [PLURAL],
                "verbs": ["get", "list", "create", "patch"],
            }
        ],
    }
    rbac.create_namespaced_role(namespace, model(client.V1Role, role))
    binding = {
        "metadata": {"name": "alice"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "alice"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
    }
    rbac.create_namespaced_role_binding(namespace, model(client.V1RoleBinding, binding))
    return control_plane.user_kubeconfig("alice")


def ctl(kubeconfig: Path, namespace: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["--kubeconfig", str(kubeconfig), "-n", namespace, *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def policy(admin: client.ApiClient, namespace: str) -> dict[str, Any]:
    return read_policy(admin, namespace, "spillover")


def record_of(pol: dict[str, Any]) -> ChangeRecord:
    return decode(pol["metadata"]["annotations"][CHANGE_RECORD_ANNOTATION])


def merge_patch(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    """What `kubectl patch --type merge` sends (the raw API, not spilloverctl)."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "spillover", body
    )


def refusal(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as info:
        merge_patch(api, namespace, body)
    assert info.value.status == 403, info.value.body
    return str(json.loads(info.value.body)["message"])


def as_user(kubeconfig: Path) -> client.ApiClient:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def setup(admin: client.ApiClient, namespace: str) -> None:
    env = {"LOG_LEVEL": "info", PASSTHROUGH_VAR: "A"}
    create_object(
        admin,
        deployment_manifest(
            WRC, [container_manifest("controller", "example.invalid/wrc:1", env)],
            namespace=namespace,
        ),
    )  # fmt: skip
    create_object(
        admin, policy_manifest(namespace, {"enabled": True, "target": {"deployment": WRC}})
    )


def events(admin: client.ApiClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    raw: Any = client.CoreV1Api(admin).list_namespaced_event(namespace, _preload_content=False)
    return [
        e
        for e in json.loads(raw.data)["items"]
        if e.get("reason") == reason and e["involvedObject"].get("kind") == "SpilloverPolicy"
    ]


def messages_for(
    admin: client.ApiClient, namespace: str, reason: str, generation: int
) -> list[str]:
    tag = f"generation {generation} changed"
    return [e["message"] for e in events(admin, namespace, reason) if tag in e["message"]]


# ------------------------------------------------------------------------------- tests


def test_alice_is_recorded_as_alice_whatever_her_user_variable_says(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    alice: Path,
    admission: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup(admin, namespace)
    monkeypatch.setenv("USER", "cto")
    monkeypatch.setenv("LOGNAME", "cto")
    code, out, err = ctl(alice, namespace, "kill", "--reason", "INC-99 approved")
    assert code == exit_codes.OK, out + err
    pol = policy(admin, namespace)
    record = record_of(pol)
    assert (record.user, record.generation) == ("alice", pol["metadata"]["generation"])
    assert record.generation == 2
    assert (record.tool, record.reason) == ("spilloverctl kill", "INC-99 approved")
    assert "cto" not in pol["metadata"]["annotations"][CHANGE_RECORD_ANNOTATION]
    # Dated by the API server's answer to that very write.
    said = re.search(
        r"change recorded: generation 2 changed by alice with spilloverctl kill "
        r"at (\S+): INC-99 approved",
        out,
    )
    assert said is not None, out
    assert said.group(1) == written_at(pol["metadata"])

    # status shows who, why and with what (read by the admin: alice may not read the
    # Deployment; no operator needed, the record is on the policy). When: only once the
    # operator has reported the change (nothing else on the policy is beyond a policy
    # editor's pen), so no time here.
    code, out, err = ctl(control_plane.kubeconfig, namespace, "status")
    assert "last change:" in out, out + err
    line = next(x for x in out.splitlines() if "last change:" in x)
    assert line.endswith("generation 2 changed by alice with spilloverctl kill: INC-99 approved")
    code, out, err = ctl(control_plane.kubeconfig, namespace, "status", "-o", "json")
    shown = json.loads(out)["lastChange"]
    assert shown == {
        "generation": 2,
        "recorded": True,
        "user": "alice",
        "tool": "spilloverctl kill",
        "reason": "INC-99 approved",
    }


def test_the_record_carries_the_servers_time_whatever_the_clients_clock_says(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    alice: Path,
    admission: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """alice's clock is 27 years behind: the command says the API server's time of the
    write that carried the record, and nothing shows hers."""
    from spillover_operator.cli import change

    setup(admin, namespace)
    wrong = datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC)
    monkeypatch.setattr(change, "_now", lambda: wrong)
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    code, out, err = ctl(alice, namespace, "kill", "--reason", "INC-7")
    after = datetime.datetime.now(datetime.UTC)
    assert code == exit_codes.OK, out + err
    pol = policy(admin, namespace)
    assert "1999" not in pol["metadata"]["annotations"][CHANGE_RECORD_ANNOTATION]
    stored = last_change(pol).record
    assert stored is not None and stored.generation == 2
    written = written_at(pol["metadata"])  # the record manager's entry: nobody rewrote it
    # The control plane runs on this machine: the server's clock is the test's.
    when = datetime.datetime.fromisoformat(written.replace("Z", "+00:00"))
    assert before - datetime.timedelta(seconds=1) <= when <= after, written
    assert f"with spilloverctl kill at {written}: INC-7" in out
    code, out, err = ctl(control_plane.kubeconfig, namespace, "status", "-o", "json")
    assert "seenAt" not in json.loads(out)["lastChange"], out + err
    assert "1999" not in out


def test_admission_refuses_a_record_alice_did_not_earn(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    alice: Path,
    admission: None,
) -> None:
    setup(admin, namespace)
    api = as_user(alice)
    try:
        # Claiming to be the CTO, with the spec change: refused, naming her and the rule.
        forged = ChangeRecord("cto", 2, "t", "spilloverctl kill", "INC-99 approved").encode()
        message = refusal(
            api,
            namespace,
            {
                "spec": {"enabled": False},
                "metadata": {"annotations": {CHANGE_RECORD_ANNOTATION: forged}},
            },
        )
        assert "a change record must name the user who makes the change" in message
        assert "this request is made by alice" in message
        assert 'the record must start with {"user":"alice",' in message
        # Her own name, but a generation other than the one this change makes.
        wrong = ChangeRecord("alice", 7, "t", "spilloverctl kill").encode()
        message = refusal(
            api,
            namespace,
            {
                "spec": {"enabled": False},
                "metadata": {"annotations": {CHANGE_RECORD_ANNOTATION: wrong}},
            },
        )
        assert "must name the generation this change makes (2)" in message
        # Her own record without a spec change: it would describe someone else's change.
        own = ChangeRecord("alice", 1, "t", "spilloverctl kill").encode()
        message = refusal(
            api, namespace, {"metadata": {"annotations": {CHANGE_RECORD_ANNOTATION: own}}}
        )
        assert "alice may not set or change the change record" in message
        assert "without changing its spec" in message
        pol = policy(admin, namespace)
        assert pol["metadata"]["generation"] == 1
        assert CHANGE_RECORD_ANNOTATION not in (pol["metadata"].get("annotations") or {})
        # At CREATE the generation is 1: her own record of it is admitted (dry run).
        created = policy_manifest(
            namespace, {"enabled": True, "target": {"deployment": WRC}}, "another"
        )
        mine = ChangeRecord("alice", 1, "t", "kubectl create", "new policy").encode()
        created["metadata"]["annotations"] = {CHANGE_RECORD_ANNOTATION: mine}
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, created, dry_run="All"
        )
        created["metadata"]["annotations"] = {
            CHANGE_RECORD_ANNOTATION: ChangeRecord("alice", 2, "t", "kubectl create").encode()
        }
        with pytest.raises(ApiException) as info:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, created, dry_run="All"
            )
        assert "must name the generation this change makes (1)" in str(info.value.body)

        # Through spilloverctl: admitted, then the record cannot be erased on its own.
        code, out, err = ctl(alice, namespace, "kill", "--reason", "INC-7")
        assert code == exit_codes.OK, out + err
        message = refusal(
            api, namespace, {"metadata": {"annotations": {CHANGE_RECORD_ANNOTATION: None}}}
        )
        assert "alice may not remove the change record" in message
        # kopf's and anyone's other metadata pass.
        merge_patch(api, namespace, {"metadata": {"labels": {"team": "payments"}}})

        # A spec change that keeps alice's record (kubectl patch, GitOps) is admitted, and
        # is a change without a reason by an unknown user: never under alice's record.
        merge_patch(admin, namespace, {"spec": {"enabled": True}})
        pol = policy(admin, namespace)
        assert record_of(pol).generation == 2 and pol["metadata"]["generation"] == 3
        last = last_change(pol)
        assert last.record is None
        code, out, err = ctl(control_plane.kubeconfig, namespace, "status")
        line = next(x for x in out.splitlines() if "last change:" in x)
        assert "generation 3 changed without a reason by an unknown user" in line
        assert "INC-7" not in line and "alice" not in line.split("(")[0]
        # spilloverctl's next change replaces the stale record with a true one.
        code, out, err = ctl(alice, namespace, "set", "--threshold", "32KiB")
        assert code == exit_codes.OK, out + err
        pol = policy(admin, namespace)
        assert (record_of(pol).user, record_of(pol).generation, record_of(pol).reason) == (
            "alice",
            4,
            None,
        )
    finally:
        api.close()


def test_events_name_the_recorded_change_or_none_and_a_change_made_while_down_is_not_drift(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    alice: Path,
    admission: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup(admin, namespace)
    monkeypatch.setenv("USER", "cto")
    op = OperatorProcess(namespace, control_plane.kubeconfig, tmp_path, resync_seconds=300)
    op.start()
    try:

        def settled(generation: int, enabled: str) -> dict[str, Any] | None:
            pol = policy(admin, namespace)
            dep: Any = client.AppsV1Api(admin).read_namespaced_deployment(
                WRC, namespace, _preload_content=False
            )
            env = env_map(json.loads(dep.data), "controller")
            ok = current(pol) and pol["metadata"]["generation"] == generation
            return pol if ok and env.get(ENABLED_VAR) == enabled else None

        wait_for("the policy applied", lambda: settled(1, "true"), operator=op)

        # alice kills with a reason: the operator's Applied Events name her, not $USER.
        code, out, err = ctl(alice, namespace, "kill", "--reason", "INC-99")
        assert code == exit_codes.OK, out + err
        pol = wait_for("the kill applied", lambda: settled(2, "false"), operator=op)
        assert pol["status"]["lastChange"]["user"] == "alice"
        seen = pol["status"]["lastChange"]["seenAt"]
        applied = wait_for(
            "the Applied Event of generation 2",
            lambda: messages_for(admin, namespace, "Applied", 2) or None,
            operator=op,
        )
        assert all(
            f"changed by alice with spilloverctl kill at {seen}" in m and m.endswith(": INC-99)")
            for m in applied
        )
        assert not any("cto" in e["message"] for e in events(admin, namespace, "Applied"))

        # The admin restores with `kubectl patch`: reported as reasonless, not as INC-99.
        merge_patch(admin, namespace, {"spec": {"enabled": True}})
        pol = wait_for("the restore applied", lambda: settled(3, "true"), operator=op)
        assert pol["status"]["lastChange"] == {
            "generation": 3,
            "recorded": False,
            "note": "the change record describes generation 2, not this one",
        }
        applied = wait_for(
            "the Applied Event of generation 3",
            lambda: messages_for(admin, namespace, "Applied", 3) or None,
            operator=op,
        )
        for message in applied:
            assert "generation 3 changed without a reason by an unknown user" in message
            assert "INC-99" not in message and "by alice" not in message

        # alice kills while the operator is down; it applies the change when it is back:
        # a policy change (Applied, with her record), not drift.
        op.stop()
        code, out, err = ctl(alice, namespace, "kill", "--reason", "INC-100")
        assert code == exit_codes.OK, out + err
        op.start()
        pol = wait_for(
            "the kill applied after the restart", lambda: settled(4, "false"), operator=op
        )
        applied = wait_for(
            "the Applied Event of generation 4",
            lambda: messages_for(admin, namespace, "Applied", 4) or None,
            operator=op,
        )
        assert all("changed by alice" in m and m.endswith(": INC-100)") for m in applied)
        assert events(admin, namespace, "DriftCorrected") == []
        assert pol["status"]["lastChange"]["reason"] == "INC-100"
    finally:
        op.stop()


# ---- issue 39, item 3: a record is shown only as the server wrote it ------------------

# alice's own record, written with kubectl: her name and the generation her change
# makes (so the shipped admission admits it), a time of her choosing, and a newline
# and terminal escapes that would print a line of their own, erase one, or retitle the
# terminal.
FORGED_TOOL = "kubectl\x1b[2K\r"
FORGED_REASON = (
    "INC-1\ngeneration 99 changed by cto@prod-bastion with spilloverctl kill: approved"
    "\x1b]0;pwned\x07"
)
SHOWN_TOOL = "kubectl\\x1b[2K\\r"
SHOWN_REASON = (
    "INC-1\\ngeneration 99 changed by cto@prod-bastion with spilloverctl kill: approved"
    "\\x1b]0;pwned\\x07"
)


def kubectl_as(kubeconfig: Path, namespace: str, *argv: str) -> str:
    """Our kubectl (`make kubectl`) as the owner of `kubeconfig`; its stdout."""
    proc = subprocess.run(
        [kubectl(), "--kubeconfig", str(kubeconfig), "-n", namespace, *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def forge_managed_fields(kubeconfig: Path, namespace: str, when: str) -> None:
    """Rewrite metadata.managedFields (admitted for anyone who may patch the policy):
    the record manager's entry, owning the record, dated `when`."""
    entry = {
        "manager": RECORD_MANAGER,
        "operation": "Update",
        "apiVersion": f"{GROUP}/{VERSION}",
        "time": when,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{CHANGE_RECORD_ANNOTATION}": {}}}},
    }
    body = json.dumps({"metadata": {"managedFields": [entry]}})
    kubectl_as(kubeconfig, namespace, "patch", "spilloverpolicy", "spillover",
               "--type", "merge", "-p", body)  # fmt: skip


def status_as_run(kubeconfig: Path, namespace: str, *argv: str) -> str:
    """`spilloverctl status` as a user runs it: the installed console script; stdout."""
    script = Path(sys.executable).parent / "spilloverctl"
    proc = subprocess.run(
        [str(script), "--kubeconfig", str(kubeconfig), "-n", namespace, "status", *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (exit_codes.OK, exit_codes.MISMATCH), proc.stdout + proc.stderr
    return proc.stdout


def last_change_line(out: str) -> str:
    lines = [line for line in out.splitlines() if "last change:" in line]
    assert len(lines) == 1, out
    return lines[0]


def assert_one_line_escaped(out: str) -> None:
    """No character of the record reaches the terminal as itself: no ESC, no BEL, no
    line of its own; each shown escaped."""
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out, repr(out)
    assert not any(line.lstrip().startswith("generation 99") for line in out.splitlines())
    assert f"with {SHOWN_TOOL}" in last_change_line(out)
    assert "2099" not in out, out


def test_a_record_written_with_kubectl_is_shown_on_one_line_and_never_with_its_own_time(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    alice: Path,
    admission: None,
    tmp_path: Path,
) -> None:
    setup(admin, namespace)
    record = json.dumps(
        {"user": "alice", "generation": 2, "time": "2099-01-01T00:00:00Z",
         "tool": FORGED_TOOL, "reason": FORGED_REASON},
        separators=(",", ":"),
    )  # fmt: skip
    patch = {
        "spec": {"enabled": False},
        "metadata": {"annotations": {CHANGE_RECORD_ANNOTATION: record}},
    }
    kubectl_as(alice, namespace, "patch", "spilloverpolicy", "spillover",
               "--type", "merge", "-p", json.dumps(patch))  # fmt: skip
    assert record_of(policy(admin, namespace)).reason == FORGED_REASON  # admitted, as written

    # No operator has reported it: who, with what and why, escaped, and no time at all.
    admin_kc = control_plane.kubeconfig
    out = status_as_run(admin_kc, namespace)
    assert_one_line_escaped(out)
    assert last_change_line(out).endswith(
        f"generation 2 changed by alice with {SHOWN_TOOL}: {SHOWN_REASON}"
    )
    shown = json.loads(status_as_run(admin_kc, namespace, "-o", "json"))["lastChange"]
    assert shown == {"generation": 2, "recorded": True, "user": "alice",
                     "tool": SHOWN_TOOL, "reason": SHOWN_REASON}  # fmt: skip

    # alice rewrites managedFields so that the record manager's entry says 2099: the
    # same line, still no time.
    forge_managed_fields(alice, namespace, "2099-01-01T00:00:00Z")
    assert written_at(policy(admin, namespace)["metadata"]) == "2099-01-01T00:00:00Z"
    again = status_as_run(admin_kc, namespace)
    assert_one_line_escaped(again)
    assert last_change_line(again) == last_change_line(out)

    # The operator, started after both forgeries, dates the change by its own report.
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    op = OperatorProcess(namespace, control_plane.kubeconfig, tmp_path, resync_seconds=300)
    op.start()
    try:

        def reported() -> dict[str, Any] | None:
            last = (policy(admin, namespace).get("status") or {}).get("lastChange") or {}
            return last if last.get("generation") == 2 and last.get("seenAt") else None

        last = wait_for("status.lastChange of generation 2", reported, operator=op)
        after = datetime.datetime.now(datetime.UTC)
        seen = last["seenAt"]
        when = datetime.datetime.fromisoformat(seen.replace("Z", "+00:00"))
        assert before - datetime.timedelta(seconds=1) <= when <= after, seen
        assert last == {"generation": 2, "recorded": True, "user": "alice", "seenAt": seen,
                        "tool": SHOWN_TOOL, "reason": SHOWN_REASON}  # fmt: skip

        # The Applied Events, on the policy and on the Deployment: one line each.
        def applied() -> list[str] | None:
            raw: Any = client.CoreV1Api(admin).list_namespaced_event(
                namespace, field_selector="reason=Applied", _preload_content=False
            )
            found = [
                str(e["message"]) for e in json.loads(raw.data)["items"]
                if "generation 2 changed" in str(e["message"])
            ]  # fmt: skip
            return found if len(found) >= 2 else None

        messages = wait_for("the Applied Events of generation 2", applied, operator=op)
        for message in messages:
            assert message.isprintable(), repr(message)
            assert f"changed by alice with {SHOWN_TOOL} at {seen}: {SHOWN_REASON}" in message
            assert "2099" not in message

        out = status_as_run(admin_kc, namespace)
        assert_one_line_escaped(out)
        assert last_change_line(out).endswith(
            f"generation 2 changed by alice with {SHOWN_TOOL} at {seen}: {SHOWN_REASON}"
        )

        # Another managedFields edit changes nothing shown; nor may alice write the
        # status (the operator's Role alone may).
        forge_managed_fields(alice, namespace, "2098-01-01T00:00:00Z")
        assert last_change_line(status_as_run(admin_kc, namespace)) == last_change_line(out)
        api = as_user(alice)
        try:
            with pytest.raises(ApiException) as info:
                client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, PLURAL, "spillover",
                    {"status": {"lastChange": {**last, "seenAt": "2099-01-01T00:00:00Z"}}},
                )  # fmt: skip
        finally:
            api.close()
        assert info.value.status == 403
        assert policy(admin, namespace)["status"]["lastChange"]["seenAt"] == seen
    finally:
        op.stop()
