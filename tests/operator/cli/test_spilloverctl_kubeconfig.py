"""What spilloverctl refuses in a kubeconfig, and the --as flags' usage errors, through
the command line users run: each refusal names the field, the entry and the kubeconfig,
exits 5 (docs/exit-codes.md: the kubeconfig cannot be used) before anything is sent
(the server named is unreachable: had anything been sent the error would say so).

What is honoured is proven against the real API server in
tests/integration/test_kubeconfig_kinds.py."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.client import UnsupportedKubeconfig, connect

V1 = "client.authentication.k8s.io/v1"
TOKEN_CREDENTIAL = json.dumps(
    {"apiVersion": V1, "kind": "ExecCredential", "status": {"token": "x"}}
)


def _kubeconfig(
    path: Path,
    user: dict[str, Any],
    cluster: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:1", **(cluster or {})}}
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", **(context or {})}}],
        "current-context": "ctx",
    }
    path.write_text(json.dumps(doc))
    return path


def _ctl(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), stdout=out, stderr=err)
    return code, err.getvalue()


REFUSED: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], str]] = [
    # (kind, user, cluster, context, what the message names)
    (
        "auth-provider",
        {"auth-provider": {"name": "oidc", "config": {"id-token": "a.b.c"}}},
        {},
        {},
        "'auth-provider' is refused: auth providers",
    ),
    (
        "basic auth",
        {"username": "admin", "password": "secret"},
        {},
        {},
        "'password' is refused: basic authentication",
    ),
    ("unknown user field", {"token": "x", "tokne": "y"}, {}, {}, "'tokne' is refused"),
    ("unknown cluster field", {"token": "x"}, {"disable-compression": True}, {}, "cluster 'c'"),
    ("unknown context field", {"token": "x"}, {}, {"namspace": "a"}, "'namspace' is refused"),
    (
        "socks proxy",
        {"token": "x"},
        {"proxy-url": "socks5://127.0.0.1:1080"},
        {},
        "only http:// and https:// proxies",
    ),
    (
        "token and exec",
        {"token": "x", "exec": {"apiVersion": V1, "command": "echo", "args": [TOKEN_CREDENTIAL]}},
        {},
        {},
        "a token and an exec plugin together",
    ),
    (
        "unknown exec field",
        {"exec": {"apiVersion": V1, "command": "echo", "args": [TOKEN_CREDENTIAL], "shell": 1}},
        {},
        {},
        "(exec): 'shell' is refused",
    ),
    ("as-groups not a list", {"token": "x", "as": "bob", "as-groups": "team"}, {}, {}, "as-groups"),
    (
        "as-user-extra not lists",
        {"token": "x", "as": "bob", "as-user-extra": {"k": "v"}},
        {},
        {},
        "'as-user-extra' is refused: 'k' must be a list",
    ),
]


@pytest.mark.parametrize(
    ("user", "cluster", "context", "needle"),
    [r[1:] for r in REFUSED],
    ids=[r[0] for r in REFUSED],
)
@pytest.mark.parametrize("files", ["one file", "a list of files"])
def test_a_kubeconfig_feature_not_supported_is_refused_naming_it(
    tmp_path: Path,
    user: dict[str, Any],
    cluster: dict[str, Any],
    context: dict[str, Any],
    needle: str,
    files: str,
) -> None:
    path = _kubeconfig(tmp_path / "kubeconfig", user, cluster, context)
    # A list of files goes through the kubernetes package's loader, one file through the
    # plain reader: both refuse alike.
    given = str(path) if files == "one file" else f"{path}:{tmp_path / 'absent'}"
    for command in (["kill"], ["kill", "--direct"], ["status"]):
        code, err = _ctl("--kubeconfig", given, "-n", "ns", *command)
        assert code == exit_codes.API, err
        assert needle in err, err
        assert given in err and "Traceback" not in err
    with pytest.raises(UnsupportedKubeconfig):
        connect(given, field_manager="t")


def test_impersonated_groups_without_a_user_are_refused(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "k", {"token": "x", "as-groups": ["team"]})
    code, err = _ctl("--kubeconfig", str(path), "kill")
    assert code == exit_codes.API, err
    assert "needs a user to impersonate" in err and str(path) in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--as-group", "team"], "--as-group and --as-uid need --as USER"),
        (["--as-uid", "1"], "--as-group and --as-uid need --as USER"),
        (["--as", "bob\nx"], "one printable line"),
        (["--as", ""], "it is empty"),
        (["--as", "bob", *["--as-group", "g"] * 65], "at most 64 times"),
    ],
)
def test_as_flags_usage_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    path = _kubeconfig(tmp_path / "k", {"token": "x"})
    code, err = _ctl("--kubeconfig", str(path), *argv, "kill")
    err += capsys.readouterr().err  # argparse prints usage errors to sys.stderr
    assert code == exit_codes.BAD_INPUT, err
    assert needle in err


def test_a_failing_exec_plugin_is_a_config_error_not_an_anonymous_request(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "k", {"exec": {"apiVersion": V1, "command": "false"}})
    code, err = _ctl("--kubeconfig", str(path), "kill")
    assert code == exit_codes.API, err
    assert "exec credential plugin of user 'u'" in err and "gave no credentials" in err


def test_impersonation_headers_from_kubeconfig_and_flags(tmp_path: Path) -> None:
    """The headers each transport sends (the API server's answer to them is in the
    integration tests): flags over the kubeconfig field by field, as kubectl."""
    user = {
        "token": "x",
        "as": "carol",
        "as-groups": ["g1", "g2"],
        "as-uid": "u0",
        "as-user-extra": {"example.com/scope": ["a b", "c"]},
    }
    path = _kubeconfig(tmp_path / "k", user)
    for given in (str(path), f"{path}:{tmp_path / 'absent'}"):
        conn = connect(given, field_manager="t")
        assert conn.impersonation.headers() == [
            ("Impersonate-User", "carol"),
            ("Impersonate-Group", "g1"),
            ("Impersonate-Group", "g2"),
            ("Impersonate-Uid", "u0"),
            ("Impersonate-Extra-example.com%2Fscope", "a b"),
            ("Impersonate-Extra-example.com%2Fscope", "c"),
        ]
        assert "as 'carol' (groups: g1, g2)" in conn.where
    from spillover_operator.client import impersonation_from_flags

    flags = impersonation_from_flags("bob", None, "u9")
    conn = connect(str(path), field_manager="t", impersonate=flags)
    assert (conn.impersonation.user, conn.impersonation.groups, conn.impersonation.uid) == (
        "bob",
        ("g1", "g2"),
        "u9",
    )
