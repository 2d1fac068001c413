"""spilloverctl on a fleet (issue 28, item 4): three local control planes, each with the
CRD, a WRC Deployment, its policy and the real operator (`kopf run`), one kubeconfig
naming each by its context; `kill`, `restore` and `status` with `--context` given more
than once and with `--all-contexts`, a context whose API server is down, a context whose
exec credential plugin never returns (given up at `--context-timeout`), and Ctrl-C in
the middle of a fleet `kill --wait` (a subprocess, as the console script runs): during
the waits, and with every cluster's write held in flight by an admission webhook."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from controlplane.fleet import merged_kubeconfig
from controlplane.localcluster import LocalCluster
from controlplane.pytest_plugin import _bin_dir, _running
from k8s_helpers import (
    container_manifest,
    create_object,
    deployment_manifest,
    env_map,
    install_crd,
    is_ready,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import running_operator
from kubernetes import client
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.domain.model import ENABLED_VAR
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

CONTEXTS = ("east", "west", "north")
WATCHED = "fleet"  # an operator watches it on every cluster
IDLE = "fleet-idle"  # no operator: a --wait there never ends by itself
DEAD = "south"  # a context whose API server is down


@dataclass
class Fleet:
    clusters: dict[str, LocalCluster]
    apis: dict[str, client.ApiClient]
    kubeconfig: Path  # the three contexts
    with_dead: Path  # the three and DEAD


def _namespace(api: client.ApiClient, name: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    wait_for(f"namespace {name}'s default ServiceAccount",
             lambda: core.list_namespaced_service_account(name).items)  # fmt: skip


def _prepare(api: client.ApiClient, namespace: str) -> None:
    """The WRC Deployment rolled out with spillover ON, and its policy (enabled)."""
    _namespace(api, namespace)
    on = {ENABLED_VAR: "true"}
    create_object(
        api,
        deployment_manifest(
            "wrc", [container_manifest("controller", "example.invalid/wrc:1", on)],
            namespace=namespace, replicas=2,
        ),
    )  # fmt: skip
    wait_for("the WRC to roll out", lambda: _rolled_out(api, namespace))
    create_object(
        api, policy_manifest(namespace, {"enabled": True, "target": {"deployment": "wrc"}})
    )


def _rolled_out(api: client.ApiClient, namespace: str) -> bool:
    dep = read_deployment(api, namespace, "wrc")
    status = dep.get("status") or {}
    want = dep["spec"].get("replicas", 1)
    return bool(
        status.get("observedGeneration") == dep["metadata"]["generation"]
        and status.get("updatedReplicas") == want
        and status.get("availableReplicas") == want
        and status.get("replicas") == want
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three control planes (started once for the module), each prepared in WATCHED (with
    its operator) and IDLE (without one)."""
    bin_dir = _bin_dir()
    with ExitStack() as stack:
        clusters: dict[str, LocalCluster] = {}
        apis: dict[str, client.ApiClient] = {}
        for name in CONTEXTS:
            cluster = LocalCluster(tmp_path_factory.mktemp(f"fleet-{name}"), bin_dir)
            running = _running(cluster, f"control plane {name}")
            clusters[name] = next(running)
            stack.callback(lambda running=running: next(running, None))
            api = stack.enter_context(cluster.api_client())
            install_crd(api)
            _prepare(api, WATCHED)
            _prepare(api, IDLE)
            apis[name] = api
        logs = tmp_path_factory.mktemp("fleet-operators")
        for name, cluster in clusters.items():
            stack.enter_context(running_operator(cluster.kubeconfig, WATCHED, logs, name=name))
        for name, api in apis.items():
            wait_for(
                f"{name}: the policy Ready", lambda api=api: is_ready(read_policy(api, WATCHED))
            )
        where = tmp_path_factory.mktemp("fleet-kubeconfig")
        kubeconfigs = {name: c.kubeconfig for name, c in clusters.items()}
        yield Fleet(
            clusters,
            apis,
            merged_kubeconfig(where / "three", kubeconfigs),
            merged_kubeconfig(where / "four", kubeconfigs, unreachable=DEAD),
        )


def ctl(kubeconfig: Path, *argv: str) -> tuple[int, str, str]:
    """spilloverctl in-process, exactly as the console script runs it."""
    out, err = io.StringIO(), io.StringIO()
    code = run(["--kubeconfig", str(kubeconfig), *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def killed_while_waiting(proc: subprocess.Popen[str], out: str, err: str) -> dict[str, list[str]]:
    """Assert a fleet kill interrupted during its wait: exit 130 without a traceback,
    and every cluster of CONTEXTS has its row say changed, wait interrupted. The table."""
    assert proc.returncode == exit_codes.INTERRUPTED, out + err
    assert "Traceback" not in err
    table = rows(out)
    for name in CONTEXTS:
        assert table[name][0] == "130", table[name]
        assert table[name][1].startswith("changed, wait interrupted"), table[name]
    return table


def rows(stdout: str) -> dict[str, list[str]]:
    """The table: context -> [exit, outcome and detail]."""
    lines = stdout.splitlines()
    assert lines[0].split()[:3] == ["CONTEXT", "EXIT", "OUTCOME"], stdout
    table = {}
    for line in lines[1:-1]:
        context, code, rest = line.split(None, 2)
        table[context] = [code, rest]
    return table


def _enable(fleet: Fleet, namespace: str, enabled: bool) -> None:
    for api in fleet.apis.values():
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "spillover", {"spec": {"enabled": enabled}}
        )


def _wrc_enabled(api: client.ApiClient, namespace: str) -> Any:
    return env_map(read_deployment(api, namespace, "wrc"), "controller").get(ENABLED_VAR)


def test_kill_restore_and_status_across_three_clusters(fleet: Fleet) -> None:
    _enable(fleet, WATCHED, True)
    contexts = [arg for name in CONTEXTS for arg in ("--context", name)]
    code, out, err = ctl(fleet.kubeconfig, "-n", WATCHED, *contexts, "kill", "--wait",
                         "--timeout", "180")  # fmt: skip
    assert code == exit_codes.OK, out + err
    table = rows(out)
    assert sorted(table) == sorted(CONTEXTS)
    for name, (exit_code, rest) in table.items():
        assert exit_code == "0" and rest.startswith("done"), rest
        assert "applied by the operator" in rest or "recipe pods" in rest, rest
        assert f"[{name}] SpilloverPolicy {WATCHED}/spillover: enabled=true -> enabled=false" in err
    assert out.splitlines()[-1] == "fleet kill: 3 of 3 clusters done; exit 0"
    for name, api in fleet.apis.items():
        assert read_policy(api, WATCHED)["spec"]["enabled"] is False, name
        assert _wrc_enabled(api, WATCHED) == "false", name

    code, out, err = ctl(fleet.kubeconfig, "-n", WATCHED, "restore", "--all-contexts", "--wait",
                         "--timeout", "180")  # fmt: skip
    assert code == exit_codes.OK, out + err
    assert sorted(rows(out)) == sorted(CONTEXTS)
    for name, api in fleet.apis.items():
        assert _wrc_enabled(api, WATCHED) == "true", name

    code, out, err = ctl(fleet.kubeconfig, "-n", WATCHED, "status", "--all-contexts")
    assert code == exit_codes.OK, out + err
    for exit_code, rest in rows(out).values():
        assert exit_code == "0" and rest.startswith("consistent"), rest
        assert f"{ENABLED_VAR}=true" in rest, rest
    assert out.splitlines()[-1] == "fleet status: 3 of 3 clusters consistent; exit 0"


def test_an_unreachable_cluster_never_stops_the_others(fleet: Fleet) -> None:
    _enable(fleet, WATCHED, True)
    contexts = [arg for name in (*CONTEXTS, DEAD) for arg in ("--context", name)]
    code, out, err = ctl(fleet.with_dead, "-n", WATCHED, *contexts, "kill", "--wait",
                         "--timeout", "180")  # fmt: skip
    assert code == exit_codes.API, out + err
    table = rows(out)
    assert table[DEAD][0] == "5" and table[DEAD][1].startswith("failed (api)"), table[DEAD]
    assert f"context '{DEAD}'" in table[DEAD][1]
    for name in CONTEXTS:
        assert table[name][0] == "0" and table[name][1].startswith("done"), table[name]
        assert _wrc_enabled(fleet.apis[name], WATCHED) == "false", name
    assert out.splitlines()[-1] == (
        f"fleet kill: 3 of 4 clusters done; not done: {DEAD} (exit 5); exit 5"
    )

    code, out, _ = ctl(fleet.with_dead, "-n", WATCHED, "status", "--all-contexts")
    assert code == exit_codes.API
    assert rows(out)[DEAD][0] == "5" and sorted(rows(out)) == sorted((*CONTEXTS, DEAD))


def _default_sigint() -> None:  # runs in the child: a suite run as a background job
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # inherits SIGINT ignored


SLOW = "slow"  # a context whose exec credential plugin runs until the test releases it


def _with_a_slow_login(fleet: Fleet, directory: Path) -> Path:
    """The three contexts and SLOW, whose exec credential plugin (as cloud CLIs log in)
    says it started, then blocks until `directory/release` exists: that cluster is still
    connecting, before any write, for as long as the test wants."""
    plugin = directory / "plugin.py"
    plugin.write_text(
        "import json, pathlib, time\n"
        f"here = pathlib.Path({str(directory)!r})\n"
        "(here / 'started').touch()\n"
        "while not (here / 'release').exists():\n"
        "    time.sleep(0.05)\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': 'x'}}))\n"
    )
    doc = json.loads(fleet.kubeconfig.read_text())
    doc["clusters"].append({"name": SLOW, "cluster": dict(doc["clusters"][0]["cluster"])})
    doc["users"].append({"name": SLOW, "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(plugin)], "interactiveMode": "Never"}}})  # fmt: skip
    doc["contexts"].append({"name": SLOW, "context": {"cluster": SLOW, "user": SLOW}})
    path = directory / "kubeconfig"
    path.write_text(json.dumps(doc))
    return path


def test_ctrl_c_leaves_every_cluster_changed_or_untouched(fleet: Fleet, tmp_path: Path) -> None:
    """In IDLE no operator runs: each cluster's --wait goes on until Ctrl-C, which comes
    once every cluster shows its first progress line (its change written) and SLOW's
    login is running (it has sent nothing)."""
    _enable(fleet, IDLE, True)
    kubeconfig = _with_a_slow_login(fleet, tmp_path)
    contexts = [arg for name in (*CONTEXTS, SLOW) for arg in ("--context", name)]
    script = Path(sys.executable).parent / "spilloverctl"
    proc = subprocess.Popen(
        [str(script), "--kubeconfig", str(kubeconfig), "-n", IDLE, *contexts, "kill",
         "--wait", "--timeout", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        waiting: set[str] = set()
        deadline = time.monotonic() + 120
        while waiting != set(CONTEXTS):
            line = proc.stderr.readline()
            assert line and time.monotonic() < deadline, f"no progress; waiting on {waiting}"
            for name in CONTEXTS:
                if line.startswith(f"[{name}] ["):  # a progress line: it is waiting now
                    waiting.add(name)
        wait_for("the slow login to start", lambda: (tmp_path / "started").exists())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        (tmp_path / "release").touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    table = killed_while_waiting(proc, out, err)
    for name in CONTEXTS:
        assert read_policy(fleet.apis[name], IDLE)["spec"]["enabled"] is False, name
    assert table[SLOW][0] == "130"
    assert table[SLOW][1].startswith("not started"), table[SLOW]
    assert "nothing was sent" in table[SLOW][1]
    assert out.splitlines()[-1] == (
        "fleet kill: 0 of 4 clusters done; not done: east (exit 130), west (exit 130), "
        "north (exit 130), slow (exit 130); interrupted; exit 130"
    )


HUNG = "hung"  # a context whose exec credential plugin never returns


def _with_a_hung_login(fleet: Fleet, directory: Path) -> Path:
    """The three contexts and HUNG (north's API server), whose exec credential plugin
    notes its PID, starts a child that sleeps for ever, notes its PID and waits for it:
    that cluster never gets its credentials."""
    plugin = directory / "plugin.sh"
    plugin.write_text(
        "#!/bin/sh\n"
        f"echo $$ > {directory}/plugin.pid\n"
        "sleep 100000 &\n"
        f"echo $! > {directory}/helper.pid\n"
        "wait\n"
    )
    plugin.chmod(0o755)
    doc = json.loads(fleet.kubeconfig.read_text())
    north = next(c for c in doc["clusters"] if c["name"] == "north")
    doc["clusters"].append({"name": HUNG, "cluster": dict(north["cluster"])})
    doc["users"].append({"name": HUNG, "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}}})  # fmt: skip
    doc["contexts"].append(
        {"name": HUNG, "context": {"cluster": HUNG, "user": HUNG, "namespace": WATCHED}}
    )
    path = directory / "kubeconfig"
    path.write_text(json.dumps(doc))
    return path


def _still_running(directory: Path, name: str) -> bool:
    """Whether the process whose PID the plugin noted in `name`.pid still runs (a
    zombie has ended)."""
    try:
        pid = int((directory / f"{name}.pid").read_text())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_login_that_never_returns_is_timed_out_and_the_others_are_killed(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Issue 39, item 4: `kill --context east --context hung --context west` with HUNG's
    exec plugin never returning. The command ends (at HUNG's bound), names HUNG `timed
    out`, exits 5 (a cluster not changed), has killed east and west, printed their
    lines before HUNG's, sent nothing to HUNG's cluster and stopped its plugin."""
    _enable(fleet, WATCHED, True)
    kubeconfig = _with_a_hung_login(fleet, tmp_path)
    bound = 20  # seconds; a kill without --wait takes about one here
    script = Path(sys.executable).parent / "spilloverctl"
    proc = subprocess.Popen(
        [str(script), "--kubeconfig", str(kubeconfig), "-n", WATCHED, "kill",
         "--context", "east", "--context", HUNG, "--context", "west",
         "--context-timeout", str(bound)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_default_sigint,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=bound + 120)  # it ends: not how fast
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == exit_codes.API, out + err
    assert "Traceback" not in err
    table = rows(out)
    assert sorted(table) == sorted(["east", HUNG, "west"])
    assert table[HUNG][0] == "5" and table[HUNG][1].startswith("timed out"), table[HUNG]
    assert f"gave no credentials within {bound} s" in table[HUNG][1]
    assert table[HUNG][1].endswith("nothing was sent"), table[HUNG]
    for name in ("east", "west"):
        assert table[name][0] == "0" and table[name][1].startswith("done"), table[name]
        assert read_policy(fleet.apis[name], WATCHED)["spec"]["enabled"] is False, name
    # The lines came as they were known: HUNG's, at its bound, after the other two.
    assert [line.split()[0] for line in out.splitlines()[1:-1]][-1] == HUNG, out
    assert out.splitlines()[-1] == (
        f"fleet kill: 2 of 3 clusters done; not done: {HUNG} (exit 5); exit 5"
    )
    assert read_policy(fleet.apis["north"], WATCHED)["spec"]["enabled"] is True
    wait_for("the plugin stopped", lambda: not _still_running(tmp_path, "plugin"))
    wait_for("the plugin's child stopped", lambda: not _still_running(tmp_path, "helper"))


class HeldWrites:
    """A real admission webhook on each cluster (ValidatingWebhookConfiguration, served
    here over TLS) for UPDATEs of the policies in IDLE: a write reaches it and waits
    there, in flight, until `release()`; a dry-run write (the probe that it is in
    effect) is admitted at once. At most HOLD_LIMIT seconds each, then admitted anyway,
    so a failing test never leaves a write hanging."""

    HOLD_LIMIT = 25.0  # under the webhook's timeoutSeconds (30)

    def __init__(self, directory: Path) -> None:
        import http.server
        import ssl
        import threading

        from controlplane.localcluster import _PKI

        pki = _PKI(directory)
        pair = pki.issue("webhook", "127.0.0.1", server_ips=("127.0.0.1",))
        self.ca = pki.ca.cert.read_bytes()
        self.released = threading.Event()
        self.probed: set[str] = set()
        self.arrived: set[str] = set()
        self.lock = threading.Lock()
        held = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                context = self.path.split("?")[0].strip("/")  # the URL names it
                with held.lock:
                    (held.probed if request.get("dryRun") else held.arrived).add(context)
                if not request.get("dryRun"):
                    held.released.wait(HeldWrites.HOLD_LIMIT)
                body = json.dumps({
                    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": request["uid"], "allowed": True},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(str(pair.cert), str(pair.key))
        self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def configuration(self, context: str) -> dict[str, Any]:
        import base64

        port = self.server.server_address[1]
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "hold-policy-writes"},
            "webhooks": [{
                "name": "hold.spillover.test",
                "clientConfig": {"url": f"https://127.0.0.1:{port}/{context}",
                                 "caBundle": base64.b64encode(self.ca).decode()},
                "rules": [{"apiGroups": [GROUP], "apiVersions": ["*"],
                           "operations": ["UPDATE"], "resources": [PLURAL]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": IDLE}},
                "failurePolicy": "Ignore", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 30,
            }],
        }  # fmt: skip

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def _in_effect(held: HeldWrites, name: str, api: client.ApiClient) -> bool:
    """A dry-run write of the IDLE policy: the webhook sees it once it is in effect."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, IDLE, PLURAL, "spillover",
        {"metadata": {"annotations": {"probe": str(time.monotonic())}}}, dry_run="All",
    )  # fmt: skip
    return name in held.probed


def test_ctrl_c_with_writes_in_flight_finishes_each_write(fleet: Fleet, tmp_path: Path) -> None:
    """Ctrl-C (twice) while each cluster's kill is held in admission, in flight: the
    command finishes every write before it ends, and each policy is killed with its
    change record; the table says so, the exit code says interrupted."""
    from spillover_operator.domain.change_record import last_change

    _enable(fleet, IDLE, True)
    held = HeldWrites(tmp_path / "pki")
    registration = {
        name: client.AdmissionregistrationV1Api(api) for name, api in fleet.apis.items()
    }
    proc: subprocess.Popen[str] | None = None
    try:
        for name, reg in registration.items():
            reg.create_validating_webhook_configuration(held.configuration(name))
        for name, api in fleet.apis.items():
            wait_for(f"{name}: the webhook in effect",
                     lambda name=name, api=api: _in_effect(held, name, api))  # fmt: skip

        contexts = [arg for name in CONTEXTS for arg in ("--context", name)]
        script = Path(sys.executable).parent / "spilloverctl"
        proc = subprocess.Popen(
            [str(script), "--kubeconfig", str(fleet.kubeconfig), "-n", IDLE, *contexts,
             "kill", "--reason", "INC-7", "--wait", "--timeout", "300"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_default_sigint, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        wait_for("every cluster's write held in admission",
                 lambda: held.arrived == set(CONTEXTS))  # fmt: skip
        assert proc.poll() is None
        assert proc.stderr is not None
        proc.send_signal(signal.SIGINT)
        seen: list[str] = []

        def line_with(text: str) -> str:
            while True:
                line = proc.stderr.readline()  # type: ignore[union-attr]
                assert line, f"ended without {text!r}: {''.join(seen)}"
                seen.append(line)
                if text in line:
                    return line

        in_flight = line_with("finishing the write in flight on")
        assert all(name in in_flight for name in CONTEXTS), in_flight
        proc.send_signal(signal.SIGINT)  # another Ctrl-C: noted, the writes go on
        line_with("still finishing the write on")
        assert proc.poll() is None
        held.release()
        out, err = proc.communicate(timeout=120)
        err = "".join(seen) + err
    finally:
        held.close()
        for reg in registration.values():
            reg.delete_validating_webhook_configuration("hold-policy-writes")
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    killed_while_waiting(proc, out, err)
    for name in CONTEXTS:
        policy = read_policy(fleet.apis[name], IDLE)
        assert policy["spec"]["enabled"] is False, name
        change = last_change(policy)
        assert change.record is not None and change.record.reason == "INC-7", name
    assert out.splitlines()[-1] == (
        "fleet kill: 0 of 3 clusters done; not done: east (exit 130), west (exit 130), "
        "north (exit 130); interrupted; exit 130"
    )
