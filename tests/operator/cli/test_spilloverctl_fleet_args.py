"""spilloverctl's fleet flags without a cluster: `--context` more than once and
`--all-contexts` are refused where they do not apply (exit 2, before any cluster is
contacted), the fleet exit code follows its stated precedence, and clusters that cannot
be reached (closed loopback ports) each get their line while the others go on. The
fleet on running clusters: tests/integration/test_spilloverctl_fleet.py."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest
import yaml
from spillover_operator import exit_codes
from spillover_operator.cli.fleet import FLEET_PRECEDENCE, fleet_code
from spillover_operator.cli.main import build_parser, run


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kubeconfig(tmp_path: Path, names: list[str]) -> Path:
    """One context per name, each an API server that is down."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": n, "cluster": {"server": f"https://127.0.0.1:{_closed_port()}"}} for n in names
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in names],
    }
    if names:
        doc["current-context"] = names[0]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_one_context_keeps_its_single_value() -> None:
    args = build_parser().parse_args(["--context", "a", "kill", "--context", "b"])
    assert (args.context, args.contexts) == ("b", ["b"])
    args = build_parser().parse_args(["kill", "--context", "a", "--context", "b"])
    assert (args.context, args.contexts) == ("b", ["a", "b"])


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["set", "--threshold", "32768", "--context", "a", "--context", "b"],
         "set takes one --context"),
        (["kill", "--all-contexts", "--context", "a"], "exclude each other"),
        (["status", "--context", "a", "--context", "a"], "'a' is given more than once"),
        (["kill", *[f"--context=c{i}" for i in range(65)]], "at most 64 times"),
        (["set", "--threshold", "32768", "--all-contexts"], "unrecognized arguments"),
    ],
)  # fmt: skip
def test_fleet_usage_errors_are_exit_2(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every context's API server is down: had the command got as far as a cluster, the
    # exit code would be 5, not 2.
    path = _kubeconfig(tmp_path, ["a", "b"])
    code, out, err = _run(["--kubeconfig", str(path), *argv])
    captured = capsys.readouterr()
    assert code == exit_codes.BAD_INPUT, err
    assert needle in err + captured.err
    assert out == ""


def test_the_fleet_code_is_the_first_by_precedence() -> None:
    assert fleet_code([0, 0, 0]) == exit_codes.OK
    assert fleet_code([0, 11, 3]) == exit_codes.TIMEOUT
    assert fleet_code([11, 6, 0]) == exit_codes.MISMATCH
    assert fleet_code([3, 4, 5]) == exit_codes.API
    assert fleet_code([5, 130, 1]) == exit_codes.INTERRUPTED
    assert fleet_code([0, 1]) == exit_codes.INTERNAL
    # Every code spilloverctl returns has its place.
    from spillover_operator.cli.errors import CODES

    assert set(CODES) == set(FLEET_PRECEDENCE)


def test_all_contexts_of_an_empty_kubeconfig_is_an_api_error(tmp_path: Path) -> None:
    code, out, err = _run(
        ["--kubeconfig", str(_kubeconfig(tmp_path, [])), "kill", "--all-contexts"]
    )
    assert code == exit_codes.API
    assert "has no context" in err and out == ""


def test_every_unreachable_cluster_gets_its_line(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, ["prod-eu", "prod-us", "prod-ap"])
    code, out, err = _run(["--kubeconfig", str(path), "kill", "--all-contexts", "--wait"])
    assert code == exit_codes.API
    lines = out.splitlines()
    assert lines[0].split() == ["CONTEXT", "EXIT", "OUTCOME", "DETAIL"]
    assert [line.split()[:4] for line in lines[1:4]] == [
        [name, "5", "failed", "(api)"] for name in ("prod-eu", "prod-us", "prod-ap")
    ]
    for line in lines[1:4]:
        assert "cannot reach the API server" in line
    assert lines[4] == (
        "fleet kill: 0 of 3 clusters done; not done: prod-eu (exit 5), prod-us (exit 5), "
        "prod-ap (exit 5); exit 5"
    )
    for name in ("prod-eu", "prod-us", "prod-ap"):
        assert f"[{name}] spilloverctl: error: " in err
    assert "Traceback" not in err


def test_all_contexts_of_a_kubeconfig_list_takes_each_file(tmp_path: Path) -> None:
    """KUBECONFIG a:b (merged as kubectl does): every context of both files, once each."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = _kubeconfig(tmp_path / "one", ["prod-eu", "prod-us"])
    second = _kubeconfig(tmp_path / "two", ["prod-ap", "prod-eu"])
    code, out, _ = _run(["--kubeconfig", f"{first}:{second}", "status", "--all-contexts"])
    assert code == exit_codes.API
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == [
        "prod-eu",
        "prod-us",
        "prod-ap",
    ]
