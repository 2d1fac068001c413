"""The transport connect() picks: plain HTTP for a plain kubeconfig (no kubernetes
import: spilloverctl starts fast), the kubernetes ApiClient for anything else."""

from __future__ import annotations

import base64
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.localcluster import _PKI
from spillover_operator.client import connect
from spillover_operator.client.transport import (
    IDLE_REUSE_S,
    ApiClientTransport,
    HttpTransport,
    NotPlain,
    _load_chain,
    _load_chain_in_memory,
    read_plain,
)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _kubeconfig(path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_token_kubeconfig_goes_over_plain_http(tmp_path: Path) -> None:
    conn = connect(str(_kubeconfig(tmp_path / "k", {"token": "abc"})), field_manager="t")
    assert isinstance(conn.transport, HttpTransport)
    assert conn.transport.headers["Authorization"] == "Bearer abc"
    assert (conn.transport.host, conn.transport.port) == ("127.0.0.1", 6443)
    assert conn.server == "https://127.0.0.1:6443"


def test_an_exec_plugin_or_a_proxy_needs_the_kubernetes_loader(tmp_path: Path) -> None:
    v1 = "client.authentication.k8s.io/v1"
    credential = json.dumps({"apiVersion": v1, "kind": "ExecCredential", "status": {"token": "x"}})
    exec_user = {"exec": {"apiVersion": v1, "command": "echo", "args": [credential]}}
    conn = connect(str(_kubeconfig(tmp_path / "e", exec_user)), field_manager="t")
    assert isinstance(conn.transport, ApiClientTransport)
    proxied = {"server": "https://127.0.0.1:6443", "proxy-url": "http://proxy:3128"}
    conn = connect(str(_kubeconfig(tmp_path / "p", {"token": "x"}, proxied)), field_manager="t")
    assert isinstance(conn.transport, ApiClientTransport)


def test_the_cli_does_not_import_the_kubernetes_package(tmp_path: Path) -> None:
    """kill/restore/set/status need only the plain transport: importing kubernetes
    would cost about half a second per command."""
    path = _kubeconfig(tmp_path / "k", {"token": "abc"})
    code = (
        "import sys\n"
        "from spillover_operator.cli import main, change, status\n"
        "from spillover_operator.client import connect\n"
        f"connect({str(path)!r}, field_manager='t')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _pki_kubeconfig(tmp_path: Path, cluster_extra: dict[str, Any]) -> tuple[Path, _PKI]:
    pki = _PKI(tmp_path / "pki")
    user = pki.issue("admin", "admin", client=True)
    cluster = {"server": "https://127.0.0.1:6443", **cluster_extra}
    if cluster.pop("ca", False):
        cluster["certificate-authority-data"] = _b64(pki.ca.cert)
    kubeconfig = _kubeconfig(
        tmp_path / "k",
        {"client-certificate-data": _b64(user.cert), "client-key-data": _b64(user.key)},
        cluster,
    )
    return kubeconfig, pki


def test_a_kubeconfig_ca_is_the_only_one_trusted(tmp_path: Path) -> None:
    kubeconfig, _ = _pki_kubeconfig(tmp_path, {"ca": True})
    conn = connect(str(kubeconfig), field_manager="t")
    assert isinstance(conn.transport, HttpTransport)
    context = conn.transport.context
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 1  # not the system's CAs as well
    subject = dict(item[0] for item in context.get_ca_certs()[0]["subject"])
    assert subject["commonName"] == "spillover-ops-local-ca"


def test_insecure_skip_tls_verify_verifies_nothing(tmp_path: Path) -> None:
    kubeconfig, _ = _pki_kubeconfig(tmp_path, {"insecure-skip-tls-verify": True})
    conn = connect(str(kubeconfig), field_manager="t")
    assert isinstance(conn.transport, HttpTransport)
    context = conn.transport.context
    assert context is not None
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


def test_client_certificate_from_memory_or_from_temporary_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain is really read on both paths: a key of another certificate fails."""
    pki = _PKI(tmp_path / "pki")
    user, other = pki.issue("a", "a", client=True), pki.issue("b", "b", client=True)
    cert, key, wrong = user.cert.read_bytes(), user.key.read_bytes(), other.key.read_bytes()

    def attempt() -> None:
        _load_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), cert, key)
        with pytest.raises(ssl.SSLError):
            _load_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), cert, wrong)

    assert _load_chain_in_memory(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), cert, key)
    attempt()

    def refused(*_args: Any) -> int:
        raise PermissionError("memfd_create: not in this sandbox")

    monkeypatch.setattr(os, "memfd_create", refused)
    assert not _load_chain_in_memory(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), cert, key)
    attempt()


def test_json_and_yaml_kubeconfigs_read_the_same(tmp_path: Path) -> None:
    as_yaml = _kubeconfig(tmp_path / "y", {"token": "abc"})
    doc = yaml.safe_load(as_yaml.read_text())
    as_json = tmp_path / "j"
    as_json.write_text(json.dumps(doc, indent=2))
    flow = tmp_path / "f"  # YAML in flow style: starts like JSON, is not JSON
    flow.write_text(yaml.safe_dump(doc, default_flow_style=True))
    assert not flow.read_text().lstrip().startswith('{"')
    for path in (as_yaml, as_json, flow):
        assert read_plain(str(path)).doc == doc
    broken = tmp_path / "b"
    broken.write_text('{"clusters": [')
    with pytest.raises(NotPlain):
        read_plain(str(broken))


def test_a_json_kubeconfig_does_not_import_yaml(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text(
        json.dumps(yaml.safe_load(_kubeconfig(tmp_path / "k", {"token": "a"}).read_text()))
    )
    code = (
        "import sys\n"
        "from spillover_operator.client import connect\n"
        f"connect({str(path)!r}, field_manager='t')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'yaml'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class _EchoAccept(http.server.BaseHTTPRequestHandler):
    """A real HTTP server that answers with the Accept header it was sent."""

    def do_GET(self) -> None:
        body = json.dumps({"accept": self.headers.get("Accept")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def echo_accept() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EchoAccept)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_both_transports_send_the_accept_header_asked_for(echo_accept: str) -> None:
    """API objects are asked for as JSON; a container's log or an endpoint behind the
    API server's proxy as anything (`*/*`), on either transport."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = echo_accept
    transports = [
        HttpTransport(echo_accept, None, {}, lambda: None),
        ApiClientTransport(client.ApiClient(configuration)),
    ]
    for transport in transports:
        plain = transport.request("GET", "/x", timeout=(5.0, 5.0))
        anything = transport.request("GET", "/x", timeout=(5.0, 5.0), accept="*/*")
        assert json.loads(plain) == {"accept": "application/json"}, type(transport).__name__
        assert json.loads(anything) == {"accept": "*/*"}, type(transport).__name__


class _KeepAlive(http.server.BaseHTTPRequestHandler):
    """A real HTTP/1.1 server that keeps connections open, counts the connections it
    accepted, and closes a kept connection without saying so when told to (as an API
    server closes one idle too long)."""

    protocol_version = "HTTP/1.1"
    connections: list[int] = []
    cut_after_answer = False

    def setup(self) -> None:
        super().setup()
        type(self).connections.append(id(self))

    def do_GET(self) -> None:
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        if type(self).cut_after_answer:
            self.close_connection = True  # no "Connection: close": the client keeps it

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def keep_alive() -> Iterator[tuple[str, type[_KeepAlive]]]:
    handler = type("KeepAlive", (_KeepAlive,), {"connections": [], "cut_after_answer": False})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_kept_connection_is_reused_only_while_fresh(
    keep_alive: tuple[str, type[_KeepAlive]],
) -> None:
    url, server = keep_alive
    now = [0.0]
    transport = HttpTransport(url, None, {}, lambda: None, clock=lambda: now[0])
    transport.request("GET", "/x", timeout=(5.0, 5.0))
    now[0] += IDLE_REUSE_S - 1
    transport.request("GET", "/x", timeout=(5.0, 5.0))
    assert len(server.connections) == 1  # kept and reused
    now[0] += IDLE_REUSE_S
    transport.request("GET", "/x", timeout=(5.0, 5.0))
    assert len(server.connections) == 2  # idle too long: closed, a new one


def test_a_kept_connection_the_server_closed_meanwhile_is_replaced(
    keep_alive: tuple[str, type[_KeepAlive]],
) -> None:
    url, server = keep_alive
    server.cut_after_answer = True
    transport = HttpTransport(url, None, {}, lambda: None)
    for _ in range(3):
        assert transport.request("GET", "/x", timeout=(5.0, 5.0)) == b"{}"
    assert len(server.connections) == 3
