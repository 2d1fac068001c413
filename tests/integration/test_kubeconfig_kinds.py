"""Kubeconfigs like kubectl (issue 28, item 2), on the real API server of the local
control plane with real RBAC: each kind of kubeconfig spilloverctl honours, and
impersonation from the kubeconfig and from --as/--as-group/--as-uid, on both of
spilloverctl's ways (through the policy, and --direct) and both of the client's
transports (plain HTTP, and the kubernetes package's ApiClient).

The server says who ran the request: the change record `--reason` writes holds the
user a SelfSubjectReview named, the full SelfSubjectReview shows groups, uid and extras,
and RBAC allows only the impersonated user's rights (the impersonator's own are not
enough, and an impersonator without the `impersonate` verb is refused).

A proxy (`proxy-url`, or HTTPS_PROXY in the environment) is a real one: a CONNECT
tunnel in this module that records every tunnel it opens.

What is refused (auth providers, basic auth, unknown fields) is in
tests/operator/cli/test_spilloverctl_kubeconfig.py: refused before anything is sent."""

from __future__ import annotations

import base64
import io
import json
import select
import socket
import socketserver
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    container_manifest,
    create_object,
    deployment_manifest,
    env_map,
    model,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kubernetes import client
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.client import Connection, connect
from spillover_operator.client.identity import PATH as SSR_PATH
from spillover_operator.client.transport import ApiClientTransport, HttpTransport
from spillover_operator.domain.change_record import decode
from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

WRC = "wrc"
V1 = "client.authentication.k8s.io/v1"
# What kill and kill --direct (with --reason) need; nothing else.
RIGHTS: list[dict[str, Any]] = [
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "patch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]
IMPERSONATE: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]},
    {"apiGroups": ["authentication.k8s.io"], "resources": ["*"], "verbs": ["impersonate"]},
]


@pytest.fixture
def workloads(admin: client.ApiClient, namespace: str) -> None:
    """The WRC Deployment (spillover ON) and the policy (enabled). Nothing waits for a
    rollout: kill without --wait only patches."""
    on = {ENABLED_VAR: "true", PASSTHROUGH_VAR: ENABLED_VAR}
    container = container_manifest("controller", "example.invalid/wrc:1", on)
    create_object(admin, deployment_manifest(WRC, [container], namespace=namespace))
    create_object(
        admin, policy_manifest(namespace, {"enabled": True, "target": {"deployment": WRC}})
    )


def grant(
    admin: client.ApiClient, namespace: str, name: str, subject: dict[str, str], as_: str
) -> None:
    """A Role with RIGHTS bound to `subject`; return once the authorizer grants it to
    `as_` (a user, or `user|group` for a member of a group)."""
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(
        namespace, model(client.V1Role, {"metadata": {"name": name}, "rules": RIGHTS})
    )
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject],
    }
    rbac.create_namespaced_role_binding(namespace, model(client.V1RoleBinding, binding))
    user, _, group = as_.partition("|")
    attributes = {"namespace": namespace, "group": GROUP, "resource": PLURAL, "verb": "patch"}
    wait_allowed(admin, user, [group] if group else [], attributes)


def wait_allowed(
    admin: client.ApiClient, user: str, groups: list[str], attributes: dict[str, str]
) -> None:
    """RBAC is read from an informer: wait until `attributes` are allowed to `user`."""
    review = {"spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}
    auth = client.AuthorizationV1Api(admin)
    wait_for(
        f"{user} {groups} granted {attributes}",
        lambda: (
            auth.create_subject_access_review(
                model(client.V1SubjectAccessReview, review)
            ).status.allowed
        ),
    )


@pytest.fixture
def impersonator(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> Iterator[Path]:
    """A person (client certificate) who may impersonate anyone, and has RIGHTS of
    their own in the namespace too: what their requests may do is then the
    impersonated user's rights, not theirs."""
    name = f"imp-{namespace}"
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_cluster_role(
        model(client.V1ClusterRole, {"metadata": {"name": name}, "rules": IMPERSONATE})
    )
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    rbac.create_cluster_role_binding(model(client.V1ClusterRoleBinding, binding))
    try:
        wait_allowed(admin, name, [], {"verb": "impersonate", "resource": "users", "name": "x"})
        grant(admin, namespace, name, _user(name), name)
        yield control_plane.user_kubeconfig(name)
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


def _user(name: str) -> dict[str, str]:
    return {"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def _group(name: str) -> dict[str, str]:
    return {"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


# ---------------------------------------------------------------- kubeconfig variants


def _doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _write(doc: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _user_entry(doc: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = doc["users"][0]["user"]
    return entry


def _cluster_entry(doc: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = doc["clusters"][0]["cluster"]
    return entry


def files_instead_of_data(doc: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Certificates, key, CA and token as files next to the kubeconfig, named relative
    to it (as kubectl resolves them)."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry, data_key, file_key in (
        (_user_entry(doc), "client-certificate-data", "client-certificate"),
        (_user_entry(doc), "client-key-data", "client-key"),
        (_cluster_entry(doc), "certificate-authority-data", "certificate-authority"),
    ):
        if data_key in entry:
            (directory / file_key).write_bytes(base64.b64decode(entry.pop(data_key)))
            entry[file_key] = file_key
    user = _user_entry(doc)
    if "token" in user:
        (directory / "token").write_text(user.pop("token") + "\n")
        user["tokenFile"] = "token"
    return doc


def exec_plugin(doc: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The user's credentials handed out by an exec credential plugin (a script printing
    an ExecCredential), as cloud CLIs do."""
    user = _user_entry(doc)
    if "token" in user:
        status = {"token": user.pop("token")}
    else:
        status = {
            "clientCertificateData": base64.b64decode(user.pop("client-certificate-data")).decode(),
            "clientKeyData": base64.b64decode(user.pop("client-key-data")).decode(),
        }
    credential = {"apiVersion": V1, "kind": "ExecCredential", "status": status}
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "plugin.py"
    script.write_text(f"print({json.dumps(json.dumps(credential))})\n")
    user["exec"] = {
        "apiVersion": V1,
        "command": sys.executable,
        "args": [str(script)],
        "interactiveMode": "Never",
    }
    return doc


def tls_server_name(doc: dict[str, Any], _: Path) -> dict[str, Any]:
    """The API server's certificate checked for one of its DNS names, not 127.0.0.1
    (the kubernetes package's loader does this)."""
    _cluster_entry(doc)["tls-server-name"] = "kubernetes"
    return doc


def as_is(doc: dict[str, Any], _: Path) -> dict[str, Any]:
    return doc


Variant = Callable[[dict[str, Any], Path], dict[str, Any]]
# (id, credential: a client certificate or a ServiceAccount token, variant, transport)
KINDS: list[tuple[str, str, Variant, type]] = [
    ("token", "token", as_is, HttpTransport),
    ("tokenFile and CA file", "token", files_instead_of_data, HttpTransport),
    ("exec plugin token", "token", exec_plugin, ApiClientTransport),
    ("client cert data and CA data", "cert", as_is, HttpTransport),
    ("client cert files and CA file", "cert", files_instead_of_data, HttpTransport),
    ("exec plugin client cert", "cert", exec_plugin, ApiClientTransport),
    ("tls-server-name", "cert", tls_server_name, ApiClientTransport),
]


# --------------------------------------------------------------------------- running


def ctl(kubeconfig: Path, namespace: str, *argv: str) -> tuple[int, str, str]:
    """spilloverctl in-process, exactly as the console script runs it."""
    out, err = io.StringIO(), io.StringIO()
    code = run(["--kubeconfig", str(kubeconfig), "-n", namespace, *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def enabled(admin: client.ApiClient, namespace: str) -> bool:
    return bool(read_policy(admin, namespace)["spec"]["enabled"])


def set_enabled(admin: client.ApiClient, namespace: str, value: bool) -> None:
    client.CustomObjectsApi(admin).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "spillover", {"spec": {"enabled": value}}
    )


def recorded(admin: client.ApiClient, namespace: str) -> tuple[str, str | None]:
    """Who the change record names, and its reason."""
    notes = read_policy(admin, namespace)["metadata"].get("annotations") or {}
    record = decode(notes[CHANGE_RECORD_ANNOTATION])
    return record.user, record.reason


def wrc_enabled(admin: client.ApiClient, namespace: str) -> str | None:
    value = env_map(read_deployment(admin, namespace, WRC), "controller").get(ENABLED_VAR)
    return None if value is None else str(value)


def kill_both_ways(
    admin: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    expected_user: str,
    *flags: str,
) -> None:
    """kill through the policy, then kill --direct, each recording `expected_user`
    (the server's SelfSubjectReview) and turning spillover OFF."""
    for way, extra in (("policy", ()), ("direct", ("--direct",))):
        set_enabled(admin, namespace, True)
        code, out, err = ctl(kubeconfig, namespace, *flags, "kill", *extra, "--reason", way)
        assert code == exit_codes.OK, out + err
        assert enabled(admin, namespace) is False
        assert recorded(admin, namespace) == (expected_user, way), way
        if extra:
            assert wrc_enabled(admin, namespace) == "false"


def who(conn: Connection) -> dict[str, Any]:
    """The whole userInfo the API server's SelfSubjectReview answers for `conn`."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    raw = conn.transport.request(
        "POST", SSR_PATH, body=body, content_type="application/json", timeout=(10.0, 30.0)
    )
    info: dict[str, Any] = json.loads(raw)["status"]["userInfo"]
    return info


# ----------------------------------------------------------------------------- tests


@pytest.mark.usefixtures("workloads")
@pytest.mark.parametrize(
    ("credential", "variant", "transport"),
    [k[1:] for k in KINDS],
    ids=[k[0] for k in KINDS],
)
def test_each_kind_of_kubeconfig_acts_as_its_user_both_ways(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    credential: str,
    variant: Variant,
    transport: type,
) -> None:
    if credential == "token":
        client.CoreV1Api(admin).create_namespaced_service_account(
            namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="oncall"))
        )
        user = f"system:serviceaccount:{namespace}:oncall"
        subject = {"kind": "ServiceAccount", "name": "oncall", "namespace": namespace}
        grant(admin, namespace, "oncall", subject, user)
        base = control_plane.service_account_kubeconfig(namespace, "oncall")
    else:
        user = f"oncall-{namespace}"
        grant(admin, namespace, "oncall", _user(user), user)
        base = control_plane.user_kubeconfig(user)
    kubeconfig = _write(variant(_doc(base), tmp_path), tmp_path / "kubeconfig")

    conn = connect(str(kubeconfig), None, namespace, field_manager="test")
    assert isinstance(conn.transport, transport)
    assert who(conn)["username"] == user
    kill_both_ways(admin, kubeconfig, namespace, user)


@pytest.mark.usefixtures("workloads")
def test_a_tls_server_name_the_certificate_lacks_is_refused_by_tls(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """tls-server-name is honoured, not ignored: a name the API server's certificate
    does not hold fails the TLS check (it would pass for 127.0.0.1)."""
    doc = _doc(control_plane.kubeconfig)
    _cluster_entry(doc)["tls-server-name"] = "not-the-apiserver.invalid"
    kubeconfig = _write(doc, tmp_path / "kubeconfig")
    code, out, err = ctl(kubeconfig, namespace, "kill")
    assert code == exit_codes.API, out + err
    assert "certificate" in err.lower() or "hostname" in err.lower(), err
    assert enabled(admin, namespace) is True


def _impersonating(doc: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    _user_entry(doc).update(fields)
    return doc


@pytest.mark.usefixtures("workloads")
@pytest.mark.parametrize("path", [as_is, tls_server_name], ids=["plain HTTP", "ApiClient"])
def test_impersonation_from_the_kubeconfig_runs_as_the_impersonated_user(
    admin: client.ApiClient,
    namespace: str,
    impersonator: Path,
    tmp_path: Path,
    path: Variant,
) -> None:
    """`as`, `as-groups`, `as-uid` and `as-user-extra`: the server sees bob, in his
    group, with the uid and extras; only the group's rights let him kill."""
    bob, team = f"bob-{namespace}", f"team-{namespace}"
    fields = {
        "as": bob,
        "as-groups": [team, "second"],
        "as-uid": "uid-1",
        "as-user-extra": {"example.com/scope": ["a b", "c"]},
    }
    doc = _impersonating(path(_doc(impersonator), tmp_path), fields)
    kubeconfig = _write(doc, tmp_path / "kubeconfig")

    conn = connect(str(kubeconfig), None, namespace, field_manager="test")
    info = who(conn)
    assert info["username"] == bob
    assert {team, "second", "system:authenticated"} <= set(info["groups"])
    assert info["uid"] == "uid-1"
    assert info["extra"] == {"example.com/scope": ["a b", "c"]}

    # bob himself has no rights: the impersonator's own do not count.
    code, out, err = ctl(kubeconfig, namespace, "kill", "--reason", "bob")
    assert code == exit_codes.API, out + err
    assert "forbidden" in err.lower() and bob in err, err
    assert enabled(admin, namespace) is True

    grant(admin, namespace, "team", _group(team), f"{bob}|{team}")
    kill_both_ways(admin, kubeconfig, namespace, bob)


@pytest.mark.usefixtures("workloads")
@pytest.mark.parametrize("path", [as_is, tls_server_name], ids=["plain HTTP", "ApiClient"])
def test_impersonation_flags_override_the_kubeconfig_like_kubectl(
    admin: client.ApiClient,
    namespace: str,
    impersonator: Path,
    tmp_path: Path,
    path: Variant,
) -> None:
    bob, carol, team = f"bob-{namespace}", f"carol-{namespace}", f"team-{namespace}"
    grant(admin, namespace, "team", _group(team), f"{bob}|{team}")
    plain = _write(path(_doc(impersonator), tmp_path), tmp_path / "plain")
    flags = ("--as", bob, "--as-group", team, "--as-group", "second", "--as-uid", "uid-2")

    # From the flags alone.
    conn = connect(str(plain), None, namespace, field_manager="test")
    assert who(conn)["username"] == f"imp-{namespace}"
    kill_both_ways(admin, plain, namespace, bob, *flags)

    # Over a kubeconfig that impersonates carol (no rights) in no group: the flags win.
    doc = _impersonating(path(_doc(impersonator), tmp_path), {"as": carol, "as-uid": "c"})
    carols = _write(doc, tmp_path / "carol")
    set_enabled(admin, namespace, True)
    code, out, err = ctl(carols, namespace, "kill")
    assert code == exit_codes.API and carol in err, out + err
    assert enabled(admin, namespace) is True
    kill_both_ways(admin, carols, namespace, bob, *flags)

    # The flags after the command, too; without the group bob has no rights.
    set_enabled(admin, namespace, True)
    code, out, err = ctl(plain, namespace, "kill", "--as", bob)
    assert code == exit_codes.API, out + err
    assert "forbidden" in err.lower() and bob in err
    assert enabled(admin, namespace) is True


@pytest.mark.usefixtures("workloads")
def test_impersonating_without_the_impersonate_verb_is_refused(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """A user with every right in the namespace but not `impersonate`: --as is refused
    by the API server (exit 5), nothing changes; without --as the same user may kill."""
    name = f"noimp-{namespace}"
    grant(admin, namespace, "noimp", _user(name), name)
    kubeconfig = control_plane.user_kubeconfig(name)
    for way in ((), ("--direct",)):
        code, out, err = ctl(kubeconfig, namespace, "--as", f"bob-{namespace}", "kill", *way)
        assert code == exit_codes.API, out + err
        assert "forbidden" in err.lower() and "impersonate" in err.lower(), err
        assert enabled(admin, namespace) is True
        assert wrc_enabled(admin, namespace) == "true"
    kill_both_ways(admin, kubeconfig, namespace, name)


# ---------------------------------------------------------------------------- proxies


class TunnelProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy that opens CONNECT tunnels (what kubectl and urllib3 use for https)
    and records each target before it answers, so a command that returned has its
    tunnels recorded."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.tunnels: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Tunnel(socketserver.StreamRequestHandler):
    server: TunnelProxy

    def handle(self) -> None:
        method, target, _ = self.rfile.readline(65536).decode("latin-1").split(" ", 2)
        while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
            pass  # the request's headers
        if method != "CONNECT":
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        host, port = target.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as upstream:
            self.server.tunnels.append(target)
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self.wfile.flush()
            ends = [self.connection, upstream]
            while True:
                ready, _, _ = select.select(ends, [], [], 60)
                if not ready:
                    return
                for end in ready:
                    data = end.recv(65536)
                    if not data:
                        return
                    (upstream if end is self.connection else self.connection).sendall(data)


@pytest.fixture
def proxy() -> Iterator[TunnelProxy]:
    server = TunnelProxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.usefixtures("workloads")
def test_proxy_url_carries_every_request_both_ways(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    proxy: TunnelProxy,
) -> None:
    user = f"oncall-{namespace}"
    grant(admin, namespace, "oncall", _user(user), user)
    doc = _doc(control_plane.user_kubeconfig(user))
    _cluster_entry(doc)["proxy-url"] = proxy.url
    kubeconfig = _write(doc, tmp_path / "kubeconfig")
    apiserver = control_plane.server.removeprefix("https://")

    conn = connect(str(kubeconfig), None, namespace, field_manager="test")
    assert isinstance(conn.transport, ApiClientTransport)
    assert who(conn)["username"] == user
    assert proxy.tunnels == [apiserver]
    proxy.tunnels.clear()
    kill_both_ways(admin, kubeconfig, namespace, user)
    assert proxy.tunnels and set(proxy.tunnels) == {apiserver}


@pytest.mark.usefixtures("workloads")
def test_https_proxy_from_the_environment_is_honoured_like_kubectl(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    proxy: TunnelProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain kubeconfig (which spilloverctl otherwise sends over its own HTTP) goes
    through HTTPS_PROXY when it is set, as kubectl does."""
    user = f"oncall-{namespace}"
    grant(admin, namespace, "oncall", _user(user), user)
    kubeconfig = control_plane.user_kubeconfig(user)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    kill_both_ways(admin, kubeconfig, namespace, user)
    assert set(proxy.tunnels) == {control_plane.server.removeprefix("https://")}
