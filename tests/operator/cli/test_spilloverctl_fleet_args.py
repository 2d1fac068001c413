"""spilloverctl's fleet flags without a cluster: `--context` more than once and
`--all-contexts` are refused where they do not apply (exit 2, before any cluster is
contacted), the fleet exit code follows its stated precedence, and clusters that cannot
be reached (closed loopback ports) each get their line while the others go on; a
context whose exec credential plugin never returns is given up at `--context-timeout`
(its plugin stopped), or at Ctrl-C, and never holds the others' lines; a context name
cannot add or forge a line. The fleet on running clusters:
tests/integration/test_spilloverctl_fleet.py."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        (["kill", "--context", "a", "--context-timeout", "5"], "applies to several clusters"),
        (["status", "--context-timeout", "5"], "applies to several clusters"),
        (["kill", "--all-contexts", "--context-timeout", "0"], "more than 0 seconds"),
        (["kill", "--all-contexts", "--context-timeout", "soon"], "takes seconds"),
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
    # One line each, in the order they finished; the summary in the kubeconfig's order.
    assert sorted(line.split()[:4] for line in lines[1:4]) == [
        [name, "5", "failed", "(api)"] for name in ("prod-ap", "prod-eu", "prod-us")
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
    assert sorted(line.split()[0] for line in out.splitlines()[1:-1]) == [
        "prod-ap",
        "prod-eu",
        "prod-us",
    ]
    assert out.splitlines()[-1] == (
        "fleet status: 0 of 3 clusters consistent; not consistent: prod-eu (exit 5), "
        "prod-us (exit 5), prod-ap (exit 5); exit 5"
    )


SPILLOVERCTL = str(Path(sys.executable).parent / "spilloverctl")
HANG = "hang"


def _with_a_hanging_login(tmp_path: Path, names: list[str]) -> Path:
    """`names` as in `_kubeconfig` (API servers that are down), and the context HANG
    whose exec credential plugin never returns: a shell script that notes its PID, starts
    a `sleep` (its own child, as a cloud CLI starts a browser or a helper), notes that
    PID and waits for it."""
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(
        "#!/bin/sh\n"
        f"echo $$ > {tmp_path}/plugin.pid\n"
        "sleep 100000 &\n"
        f"echo $! > {tmp_path}/helper.pid\n"
        "wait\n"
    )
    plugin.chmod(0o755)
    doc = yaml.safe_load(_kubeconfig(tmp_path, names).read_text())
    doc["clusters"].append(
        {"name": HANG, "cluster": {"server": f"https://127.0.0.1:{_closed_port()}"}}
    )
    doc["users"].append({"name": HANG, "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}}})  # fmt: skip
    doc["contexts"].append({"name": HANG, "context": {"cluster": HANG, "user": HANG}})
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def _running(tmp_path: Path, name: str) -> bool:
    """Whether the process whose PID the plugin noted in `name`.pid still runs (a zombie
    does not: it has ended, and only waits for its parent to read its status)."""
    pid_file = tmp_path / f"{name}.pid"
    if not pid_file.exists():
        return False
    try:
        stat = Path(f"/proc/{int(pid_file.read_text())}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _until(what: str, probe: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def test_a_context_whose_login_never_returns_is_timed_out(tmp_path: Path) -> None:
    """The finding of issue 39: with an exec plugin that never returns on one context of
    three, the command printed no table and did not end. Now that context is `timed
    out` at its bound, its plugin (and what the plugin started) is stopped, the others
    have their lines, and the exit code says a cluster was not changed."""
    path = _with_a_hanging_login(tmp_path, ["prod-eu", "prod-us"])
    argv = ["--context", "prod-eu", "--context", HANG, "--context", "prod-us"]
    code, out, err = _run(["--kubeconfig", str(path), "kill", *argv, "--context-timeout", "2"])
    assert code == exit_codes.API, out + err
    lines = out.splitlines()
    assert len(lines) == 5, out
    rows = {line.split()[0]: line for line in lines[1:4]}
    assert rows[HANG].split()[1:4] == ["5", "timed", "out"], rows[HANG]
    assert "exec credential plugin 'plugin.sh' gave no credentials within 2 s" in rows[HANG]
    assert rows[HANG].endswith("and was stopped; nothing was sent"), rows[HANG]
    for name in ("prod-eu", "prod-us"):
        assert rows[name].split()[1:4] == ["5", "failed", "(api)"], rows[name]
    assert lines[-1] == (
        "fleet kill: 0 of 3 clusters done; not done: prod-eu (exit 5), hang (exit 5), "
        "prod-us (exit 5); exit 5"
    )
    assert _running(tmp_path, "plugin") is False
    _until("the plugin's own child stopped", lambda: not _running(tmp_path, "helper"))


def test_lines_come_as_soon_as_known_and_ctrl_c_ends_a_login_that_hangs(
    tmp_path: Path,
) -> None:
    """The console script: the two lines that are known are printed while the third
    context is still logging in (the default bound, 60 s, is far); Ctrl-C then ends
    the command with that context `not started` and its plugin stopped."""
    path = _with_a_hanging_login(tmp_path, ["prod-eu", "prod-us"])
    proc = subprocess.Popen(
        [SPILLOVERCTL, "--kubeconfig", str(path), "kill", "--context", "prod-eu",
         "--context", HANG, "--context", "prod-us"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = [proc.stdout.readline() for _ in range(3)]  # the header and two lines
        assert sorted(line.split()[0] for line in seen[1:]) == ["prod-eu", "prod-us"], seen
        _until("the plugin started", lambda: _running(tmp_path, "helper"))
        assert proc.poll() is None  # HANG is still logging in
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == exit_codes.INTERRUPTED, rest + err
    assert "Traceback" not in err
    hang, summary = rest.splitlines()
    assert hang.split()[:4] == [HANG, "130", "not", "started"], hang
    assert summary.endswith("; interrupted; exit 130"), summary
    _until("the plugin stopped", lambda: not _running(tmp_path, "plugin"))
    _until("the plugin's own child stopped", lambda: not _running(tmp_path, "helper"))


def test_a_context_name_cannot_add_or_forge_a_line(tmp_path: Path) -> None:
    """A kubeconfig's context names are anyone's text: a newline in one printed as is
    would make a second line that reads as another cluster done. Each context has
    exactly one line, its name escaped there, in the summary and in its stderr prefix."""
    evil = "evil\nprod-us     0  done"
    names = ["prod-eu", evil, "bell\x07\r\x1b[2Jx", "back\\nslash", "line\u2028sep"]
    doc = yaml.safe_load(_kubeconfig(tmp_path, names).read_text())
    path = tmp_path / "kubeconfig.json"
    path.write_text(json.dumps(doc))  # JSON, which carries any character
    code, out, err = _run(["--kubeconfig", str(path), "kill", "--all-contexts"])
    assert code == exit_codes.API, out + err
    lines = out.splitlines()
    assert len(lines) == 1 + len(names) + 1, out
    assert all(line.isprintable() for line in lines), out
    shown = {
        "prod-eu": "prod-eu",
        evil: "evil\\nprod-us     0  done",
        names[2]: "bell\\x07\\r\\x1b[2Jx",
        names[3]: "back\\\\nslash",
        names[4]: "line\\u2028sep",
    }
    width = max(len(s) for s in shown.values())
    for escaped in shown.values():
        row = [line for line in lines[1:-1] if line.startswith(escaped.ljust(width) + "  ")]
        assert len(row) == 1, (escaped, out)
        assert row[0][width:].split()[:3] == ["5", "failed", "(api)"], row
        assert f"[{escaped}] spilloverctl: error: " in err
    assert not any(line.startswith("prod-us") for line in lines)
    assert f"{shown[evil]} (exit 5)" in lines[-1]
    assert all(line.isprintable() for line in err.splitlines()), err


def test_an_exec_plugin_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    """`client.exec_plugins`: a plugin the kubernetes package starts in a thread that
    owns it is recorded there and stopped with its process group; the package's
    waiting call then fails (the thread is free again)."""
    import threading

    from kubernetes.config import exec_provider, kube_config
    from kubernetes.config.config_exception import ConfigException
    from spillover_operator.client import exec_plugins

    provider: Any = exec_provider.ExecProvider  # the package leaves them unannotated
    node: Any = kube_config.ConfigNode

    path = _with_a_hanging_login(tmp_path, [])
    user = yaml.safe_load(path.read_text())["users"][-1]["user"]
    exec_plugins.install()
    plugins = exec_plugins.Plugins()
    failed: list[BaseException] = []

    def login() -> None:
        with plugins.owning():
            try:
                provider(node("exec", user["exec"]), None).run()
            except ConfigException as exc:
                failed.append(exc)

    thread = threading.Thread(target=login, daemon=True)
    thread.start()
    _until("the plugin's child started", lambda: _running(tmp_path, "helper"))
    assert plugins.running() == ["plugin.sh"]
    assert plugins.stop() == ["plugin.sh"]
    thread.join(30)
    assert not thread.is_alive() and failed, failed
    assert plugins.running() == []
    _until("the plugin's own child stopped", lambda: not _running(tmp_path, "helper"))
    assert os.getpgid(os.getpid()) != int((tmp_path / "plugin.pid").read_text())
