"""exec_in_pod refuses to run while impersonating: the kubernetes package opens the
exec's websocket with the credentials only, so the command would run as ourselves, not
as the user the kubeconfig or --as names. Refused before anything is sent (the server
named is unreachable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spillover_operator.client import UnsupportedKubeconfig, connect, exec_in_pod


def test_an_exec_while_impersonating_is_refused_naming_who(tmp_path: Path) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t", "as": "bob"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    conn = connect(str(path), field_manager="t")
    with pytest.raises(UnsupportedKubeconfig, match=r"cannot impersonate \(as 'bob'"):
        exec_in_pod(conn, "pod", "main", ["true"])
