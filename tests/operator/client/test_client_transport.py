"""The transport connect() picks: plain HTTP for a plain kubeconfig (no kubernetes
import: spilloverctl starts fast), the kubernetes ApiClient for anything else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from spillover_operator.client import connect
from spillover_operator.client.transport import ApiClientTransport, HttpTransport


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
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}}
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
