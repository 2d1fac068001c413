"""spilloverctl argument handling: every usage error is exit 2 with a message naming the
flag, before any cluster is contacted; kubeconfig problems are exit 5 naming the file;
a bug is exit 1 with a traceback and a request to report it."""

from __future__ import annotations

import argparse
import io
import socket
from pathlib import Path

import pytest
import yaml
from spillover_operator import exit_codes
from spillover_operator.cli.main import build_parser, run


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["set", "--threshold", "12"], "--threshold must be between 4096 and 1048576"),
        (["set", "--threshold", "2MiB"], "--threshold must be between 4096 and 1048576"),
        (["set", "--threshold", "lots"], "--threshold takes a number of bytes"),
        (["set", "--threshold", "-5"], "--threshold takes a number of bytes"),
        (["set", "--budget", "1000"], "--budget must be between 1048576 and 268435456"),
        (["set", "--budget", "512MiB"], "--budget must be between 1048576 and 268435456"),
        (["set", "--threshold", "32768", "--unset-threshold"], "not allowed with"),
        (["set", "--budget", "16MiB", "--unset-budget"], "not allowed with"),
        (["set"], "nothing to set"),
        (["kill", "--timeout", "5"], "--timeout only applies together with --wait"),
        (["kill", "--direct", "--timeout", "5"], "--timeout only applies together with --wait"),
        (["kill", "--reason", "INC-1\ngeneration 99 changed by cto"], "one printable line"),
        (["kill", "--reason", "INC-1\x1b[2K"], "one printable line"),
        (["kill", "--reason", "x" * 257], "--reason is at most 256 characters (got 257)"),
        (["kill", "--wait", "--timeout", "0"], "--timeout must be more than 0"),
        (["kill", "--wait", "--timeout", "soon"], "--timeout takes seconds"),
        (["status", "-o", "yaml"], "invalid choice"),
        (["explode"], "invalid choice"),
        (["render"], "-f/--filename"),
    ],
)
def test_usage_errors_exit_2_and_name_the_flag(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A kubeconfig that does not exist: had the command got as far as the cluster, the
    # exit code would be 5, not 2.
    code, _, err = _run(["--kubeconfig", "/nonexistent/kubeconfig", *argv])
    captured = capsys.readouterr()
    assert code == exit_codes.BAD_INPUT
    assert needle in err + captured.err
    assert "Traceback" not in err + captured.err


def test_no_command_prints_help_and_exits_2() -> None:
    code, _, err = _run([])
    assert code == exit_codes.BAD_INPUT
    assert "commands:" in err


def test_help_documents_every_command_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = _run(["--help"])
    text = capsys.readouterr().out
    assert code == exit_codes.OK
    for word in ("status", "kill", "restore", "set", "render", "--direct", "--wait"):
        assert word in text
    for line in ("0 ", "1 ", "2 ", "3 ", "4 ", "5 ", "6 ", "130"):
        assert f"\n  {line}" in text
    # Rendered from the shared table: only the codes spilloverctl can return.
    assert exit_codes.describe((exit_codes.MISMATCH,)).splitlines()[1] in text
    for harness_only in (exit_codes.PREFLIGHT, exit_codes.INCONCLUSIVE, exit_codes.LOCKED):
        assert f"\n  {harness_only} " not in text


@pytest.mark.parametrize(
    ("flag", "text", "value"),
    [
        ("threshold", "32768", 32768),
        ("threshold", "32KiB", 32768),
        ("threshold", "4096", 4096),
        ("threshold", "1MiB", 1048576),
        ("budget", "16MiB", 16777216),
        ("budget", "268435456", 268435456),
        ("budget", "1Mi", 1048576),
    ],
)
def test_sizes_within_bounds_are_accepted(flag: str, text: str, value: int) -> None:
    args = build_parser().parse_args(["set", f"--{flag}", text])
    assert getattr(args, flag) == value


def test_the_makefile_invocations_parse() -> None:
    parser = build_parser()
    for argv in (
        ["-n", "clerum", "status", "spillover"],
        ["-n", "clerum", "kill", "spillover", "--wait", "--timeout", "300"],
        ["-n", "clerum", "kill", "spillover", "--direct", "--wait", "--timeout", "300"],
        ["-n", "clerum", "restore", "spillover", "--wait", "--timeout", "300"],
        ["-n", "clerum", "restore", "spillover", "--direct", "--wait", "--timeout", "300"],
    ):
        args = parser.parse_args(argv)
        assert args.namespace == "clerum"
        assert args.policy == "spillover"


def test_flags_after_the_command_override_those_before() -> None:
    args = build_parser().parse_args(["-n", "a", "status", "-n", "b", "--context", "c"])
    assert (args.namespace, args.context) == ("b", "c")
    args = build_parser().parse_args(["-n", "a", "status"])
    assert (args.namespace, args.context, args.policy) == ("a", None, "spillover")


def test_missing_kubeconfig_is_an_api_error_naming_the_file() -> None:
    code, _, err = _run(["--kubeconfig", "/nonexistent/kubeconfig", "status"])
    assert code == exit_codes.API
    assert "/nonexistent/kubeconfig" in err
    assert "Traceback" not in err


def _kubeconfig(tmp_path: Path, server: str, namespace: str | None = None) -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": context}],
        "current-context": "ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_unknown_context_is_an_api_error_listing_the_contexts(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, "https://127.0.0.1:1")
    code, _, err = _run(["--kubeconfig", str(path), "--context", "nope", "status"])
    assert code == exit_codes.API
    assert "context 'nope' is not in kubeconfig" in err
    assert "ctx" in err


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_api_server_names_context_and_kubeconfig(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, f"https://127.0.0.1:{_closed_port()}")
    code, _, err = _run(["--kubeconfig", str(path), "kill"])
    assert code == exit_codes.API
    assert "cannot reach the API server" in err
    assert "context 'ctx'" in err and str(path) in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("garbage: [", "is not valid YAML"),
        ("apiVersion: v1\nkind: Config\n", "current-context"),
        ("apiVersion: v1\nkind: Config\ncontexts: 5\ncurrent-context: x\n", "malformed"),
    ],
)
def test_broken_kubeconfig_is_an_api_error_not_a_traceback(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    code, _, err = _run(["--kubeconfig", str(path), "status"])
    assert code == exit_codes.API
    assert str(path) in err and needle in err
    assert "Traceback" not in err


def test_no_kubeconfig_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = _run(["status"])
    assert code == exit_codes.API
    assert "does not exist; pass --kubeconfig PATH or set KUBECONFIG" in err


class _BrokenStream(io.StringIO):
    """An output stream that fails: something spilloverctl does not expect."""

    def write(self, text: str) -> int:
        raise RuntimeError("the stream broke")


def test_an_unexpected_exception_is_internal_error_1_with_the_traceback(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: spillover.clerum.io/v1alpha1\nkind: SpilloverPolicy\n"
        "metadata: {name: spillover}\nspec: {enabled: true, target: {deployment: wrc}}\n"
    )
    err = io.StringIO()
    code = run(["render", "-f", str(policy)], stdout=_BrokenStream(), stderr=err)
    assert code == exit_codes.INTERNAL
    text = err.getvalue()
    assert "internal error (a bug in spilloverctl; please report it)" in text
    assert "Traceback" in text and "RuntimeError: the stream broke" in text


@pytest.mark.parametrize("columns", ["60", "132", "junk", None])
def test_help_is_laid_out_as_argparse_lays_it_out(
    monkeypatch: pytest.MonkeyPatch, columns: str | None
) -> None:
    """spilloverctl measures the terminal itself (argparse would import shutil for it):
    every help text must come out exactly as with argparse's own formatter."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    parser = build_parser()
    subcommands = [
        sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for sub in action.choices.values()
    ]
    assert len(subcommands) == 5
    ours = [p.format_help() for p in (parser, *subcommands)]
    for p in (parser, *subcommands):
        p.formatter_class = argparse.RawDescriptionHelpFormatter
    assert [p.format_help() for p in (parser, *subcommands)] == ours
    assert "spilloverctl -n clerum kill --wait --timeout 300" in ours[0]
