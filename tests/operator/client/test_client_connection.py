"""connect(): kubeconfig, context and namespace choices, and every way a kubeconfig can
be unusable as a ConfigError naming the file (no API server needed: nothing is sent)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from spillover_operator.client import ConfigError, Connection, connect

FM = "test"


def _kubeconfig(
    path: Path, server: str = "https://127.0.0.1:1", namespace: str | None = None
) -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": context}, {"name": "other", "context": context}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_namespace_comes_from_the_argument_then_the_context_then_clerum(tmp_path: Path) -> None:
    with_ns = _kubeconfig(tmp_path / "a", namespace="team-a")
    assert connect(str(with_ns), field_manager=FM).namespace == "team-a"
    assert connect(str(with_ns), None, "explicit", field_manager=FM).namespace == "explicit"
    without = _kubeconfig(tmp_path / "b")
    assert connect(str(without), field_manager=FM).namespace == "clerum"


def test_the_connection_names_its_context_kubeconfig_and_server(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "k", server="https://127.0.0.1:6443")
    conn = connect(str(path), "other", field_manager="spilloverctl")
    assert (conn.context, conn.kubeconfig, conn.field_manager) == (
        "other",
        str(path),
        "spilloverctl",
    )
    assert conn.where == (
        f"context 'other' in kubeconfig '{path}' (API server https://127.0.0.1:6443)"
    )
    moved = conn.in_namespace("elsewhere")
    assert moved.namespace == "elsewhere" and moved.api_client is conn.api_client
    assert conn.in_namespace(conn.namespace) is conn


def test_kubeconfig_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _kubeconfig(tmp_path / "env", namespace="from-env")
    monkeypatch.setenv("KUBECONFIG", str(path))
    conn = connect(field_manager=FM)
    assert (conn.kubeconfig, conn.namespace) == (str(path), "from-env")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("garbage: [", "is not valid YAML"),
        ("apiVersion: v1\nkind: Config\n", "current-context"),
        ("apiVersion: v1\nkind: Config\ncontexts: 5\ncurrent-context: x\n", "malformed"),
    ],
)
def test_a_broken_kubeconfig_is_a_config_error_naming_it(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        connect(str(path), field_manager=FM)
    assert str(path) in info.value.message and needle in info.value.message


def test_an_unknown_context_lists_the_known_ones(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "k")
    with pytest.raises(
        ConfigError, match=r"context 'nope' is not in kubeconfig .*other, ctx|ctx, other"
    ):
        connect(str(path), "nope", field_manager=FM)


def test_no_kubeconfig_anywhere_says_how_to_give_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(
        ConfigError, match="does not exist; pass --kubeconfig PATH or set KUBECONFIG"
    ):
        connect(field_manager=FM)


def test_in_a_pod_without_a_service_account_the_error_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KUBERNETES_SERVICE_HOST set, no kubeconfig: the in-cluster account is tried, and
    # this machine has no token file.
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="cannot load the in-cluster configuration"):
        connect(field_manager=FM)


def test_the_operator_falls_back_to_the_kubeconfig_outside_a_usable_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _kubeconfig(tmp_path / "k", namespace="ops")
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    conn = connect(field_manager="spillover-operator", prefer_in_cluster=True)
    assert isinstance(conn, Connection)
    assert conn.kubeconfig == str(path)
