"""A real, local Kubernetes control plane for the tests: no Docker, no VM.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (a fake kubelet
that makes Nodes and the Pods bound to them Ready) run as plain processes on loopback
(127.0.0.1, free ports picked at start), from the binaries that ``build.sh`` compiles
from upstream Go modules into a cache outside the repository.

    with LocalCluster(Path("/tmp/c")) as cluster:
        api = kubernetes.client.CoreV1Api(cluster.api_client())

CLI (for people; ``make cluster-up`` / ``make cluster-down`` / ``make cluster-env``)::

    python tests/controlplane/localcluster.py up|down|env|status [--workdir DIR]

``up`` starts the processes detached and records their PIDs in ``DIR/state.json``;
``down`` stops exactly those PIDs. The default DIR is
``${SPILLOVER_CLUSTER_DIR:-/tmp/spillover-ops-cluster}``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # imported as controlplane.localcluster (tests) or run as a script (make cluster-up)
    from . import realnode
    from .processes import ProcessStopError, pid_alive, pid_runs, stop_popen, tail, terminate_pid
except ImportError:
    import realnode  # type: ignore[no-redef]
    from processes import (  # type: ignore[no-redef]
        ProcessStopError,
        pid_alive,
        pid_runs,
        stop_popen,
        tail,
        terminate_pid,
    )

_pid_alive, _pid_runs, _tail = pid_alive, pid_runs, tail


def _terminate(pid: int, executable: str | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`, to this one PID."""
    try:
        terminate_pid(pid, executable, timeout)
    except ProcessStopError as exc:
        raise ControlPlaneError(str(exc)) from None


HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
KWOK_STAGES = HERE / "kwok-stages.yaml"

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Stopped in the reverse order.
COMPONENTS = BINARIES

DEFAULT_WORKDIR = "/tmp/spillover-ops-cluster"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
POD_CIDR = "10.244.0.0/16"  # kwok hands pod IPs out of this; nothing ever connects to them
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

HOW_TO_BUILD = "run `make controlplane` (tests/controlplane/build.sh)"


class ControlPlaneError(RuntimeError):
    """The control plane could not be found, started or stopped."""


# --------------------------------------------------------------------------- binaries


def find_bin_dir() -> Path:
    """The bin dir for the current sources: $SPILLOVER_CONTROLPLANE_BIN, or what
    ``build.sh --print-bin-dir`` names (it may not exist yet: see missing_binaries)."""
    explicit = os.environ.get("SPILLOVER_CONTROLPLANE_BIN")
    if explicit:
        return Path(explicit)
    if shutil.which("go") is None:
        raise ControlPlaneError(
            "the 'go' command is not on PATH: it is needed to locate (and build) the "
            f"control plane binaries; install Go, then {HOW_TO_BUILD}"
        )
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin-dir"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT} --print-bin-dir failed: {proc.stderr.strip()}")
    return Path(proc.stdout.strip().splitlines()[-1])


def kubernetes_module_dir() -> Path:
    """Where the pinned k8s.io/kubernetes module is in the Go module cache (pause.c for
    the real node's sandbox image comes from there)."""
    module = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
        cwd=HERE,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
    )
    if module.returncode != 0 or not module.stdout.strip():
        raise ControlPlaneError(
            f"cannot find the k8s.io/kubernetes module (for pause.c): {module.stderr.strip()}; "
            f"{HOW_TO_BUILD}"
        )
    return Path(module.stdout.strip())


def missing_binaries(bin_dir: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]


# --------------------------------------------------------------------------- PKI


@dataclass(frozen=True)
class _Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class NodeCredentials:
    """What a kubelet needs: its kubeconfig (system:node:<name>) and serving pair."""

    kubeconfig: Path
    serving: _Pair


def _crypto() -> Any:
    try:
        import cryptography  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ControlPlaneError(
            "the Python package 'cryptography' is missing (it generates the cluster's "
            "certificates): run `make install` (it is in the dev extras)"
        ) from exc
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    return x509, hashes, serialization, ec, rsa, ExtendedKeyUsageOID, NameOID


class _PKI:
    """A throw-away CA and the certificates and keys the components need."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        x509, hashes, _serialization, ec, _rsa, _eku, NameOID = _crypto()
        self._now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "spillover-ops-local-ca")])
        self._ca_name = name
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()),
                critical=False,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = _Pair(self.dir / "ca.crt", self.dir / "ca.key")
        self._write(self.ca, self._ca_cert, self._ca_key)

    def _write(self, pair: _Pair, cert: Any, key: Any) -> None:
        _x509, _h, serialization, *_ = _crypto()
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        pair.key.chmod(0o600)

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
        client: bool = False,
    ) -> _Pair:
        x509, hashes, _s, ec, _rsa, ExtendedKeyUsageOID, NameOID = _crypto()
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if server_names or server_ips:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                critical=False,
            )
        )
        sans: list[Any] = [x509.DNSName(n) for n in server_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        pair = _Pair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        self._write(pair, cert, key)
        return pair

    def service_account_keys(self) -> _Pair:
        """RSA key pair that signs (private) and verifies (public) ServiceAccount tokens."""
        _x509, _h, serialization, _ec, rsa, *_ = _crypto()
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pair = _Pair(self.dir / "sa.pub", self.dir / "sa.key")
        pair.cert.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        pair.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        pair.key.chmod(0o600)
        return pair


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca: Path,
    user: str,
    client: _Pair | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """A self-contained kubeconfig (JSON is valid YAML) with the credentials embedded."""
    creds: dict[str, str] = {}
    if client is not None:
        creds["client-certificate-data"] = _b64(client.cert)
        creds["client-key-data"] = _b64(client.key)
    if token is not None:
        creds["token"] = token
    context: dict[str, str] = {"cluster": "spillover-local", "user": user}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "spillover-local",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "spillover-local", "context": context}],
        "current-context": "spillover-local",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    return path


# --------------------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pdeathsig_hook() -> Any:
    """A preexec_fn that asks the kernel to SIGTERM the child when the thread that
    started it dies (so a killed pytest leaves no component behind). libc is loaded
    here, in the parent: the hook itself only makes one system call."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1

    def hook() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return hook


# --------------------------------------------------------------------------- kwok's server


EXEC_WORKDIR = "/tmp"


def kwok_server_config(
    pod_log: Path,
    *,
    exec_on_host: bool = False,
    port_forwards: Mapping[int, int] | None = None,
) -> str:
    """kwok's server objects, as YAML documents (JSON is YAML: values are dumped as JSON).

    - ClusterLogs `all-pods`: every container of every pod logs `pod_log` (always).
    - ClusterExec `exec-on-host` (only with `exec_on_host`): exec in any pod runs the
      command on this host, in EXEC_WORKDIR, as the user running kwok.
    - ClusterPortForward `forward-to-host` (only with `port_forwards`): pod port ->
      127.0.0.1:<host port>.
    """
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "all-pods"},
            "spec": {"selector": {}, "logs": [{"logsFile": str(pod_log), "follow": False}]},
        }
    ]
    if exec_on_host:
        docs.append(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterExec",
                "metadata": {"name": "exec-on-host"},
                "spec": {"selector": {}, "execs": [{"local": {"workDir": EXEC_WORKDIR}}]},
            }
        )
    if port_forwards:
        docs.append(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterPortForward",
                "metadata": {"name": "forward-to-host"},
                "spec": {
                    "selector": {},
                    "forwards": [
                        {"ports": [pod], "target": {"port": host, "address": "127.0.0.1"}}
                        for pod, host in sorted(port_forwards.items())
                    ],
                },
            }
        )
    return "---\n".join(json.dumps(doc, indent=2) + "\n" for doc in docs)


# --------------------------------------------------------------------------- the cluster


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on loopback.

    `workdir` receives certificates (pki/), kubeconfigs, etcd's data, one log per
    component (logs/) and state.json (PIDs and ports). `bin_dir` defaults to the one
    build.sh names for the current sources.

    Opt-in kwok server features (written into `<workdir>/kwok/server.yaml`; off by
    default):

    - `exec_on_host=True`: a `ClusterExec` for every pod: `kubectl exec` (the API's
      pods/exec) runs the command **on this host, as the user running the tests (root
      here)**, in /tmp. Only for tests on a loopback-only, throw-away cluster.
    - `port_forwards={pod_port: host_port}`: a `ClusterPortForward` for every pod:
      `kubectl port-forward` (pods/portforward) to `pod_port` of any pod reaches
      127.0.0.1:`host_port` on this host.

    `audit=True`: the kube-apiserver writes an audit log (`audit_log`, JSON lines) of
    every request at the Metadata level, so a benchmark can count who asked what
    (`audit_events`). Off by default (it costs the API server a write per request).
    """

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path | None = None,
        *,
        nodes: int = 1,
        detached: bool = False,
        start_timeout: float = 90.0,
        exec_on_host: bool = False,
        port_forwards: Mapping[int, int] | None = None,
        real_node: bool = False,
        audit: bool = False,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.real_node = real_node
        self.audit = audit
        self.exec_on_host = exec_on_host
        self.port_forwards = dict(port_forwards or {})
        for pod_port, host_port in self.port_forwards.items():
            for what, port in (("pod port", pod_port), ("host port", host_port)):
                if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                    raise ControlPlaneError(
                        f"port_forwards: {what} {port!r} is not a TCP port (1..65535)"
                    )
        self.bin_dir = Path(bin_dir).resolve() if bin_dir is not None else None
        self.node_names = [f"kwok-node-{i}" for i in range(nodes)]
        self.detached = detached
        self.start_timeout = start_timeout
        self.kubeconfig = self.workdir / "kubeconfig"
        self.server = ""
        self.ports: dict[str, int] = {}
        self.pids: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._pki: _PKI | None = None
        self._started = False
        self.startup_seconds: float | None = None

    # ----------------------------------------------------------------- paths

    @property
    def state_file(self) -> Path:
        return self.workdir / "state.json"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    @property
    def kwok_server_config(self) -> Path:
        """kwok's server objects: ClusterLogs, and ClusterExec / ClusterPortForward when
        enabled (see the class doc)."""
        return self.workdir / "kwok" / "server.yaml"

    @property
    def kwok_pod_log(self) -> Path:
        """What `kubectl logs` returns for any container of any pod (kwok ClusterLogs)."""
        return self.workdir / "kwok" / "pod.log"

    def append_pod_log(self, text: str, stream: str = "stdout") -> None:
        """Append `text` to what `kubectl logs` shows for every container: kwok reads the
        file in the CRI log format (`<RFC3339Nano time> <stream> F <line>`)."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with self.kwok_pod_log.open("a") as fh:
            for line in text.splitlines():
                fh.write(f"{now} {stream} F {line}\n")

    @property
    def audit_log(self) -> Path:
        """The kube-apiserver's audit log (with `audit=True`): one JSON event per line."""
        return self.log_dir / "audit.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far, in order (empty without `audit=True`); a line
        the API server is still writing is left out."""
        try:
            text = self.audit_log.read_text()
        except FileNotFoundError:
            return []
        events: list[dict[str, Any]] = []
        for line in text.splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return events

    def log_file(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def _bin(self, name: str) -> str:
        assert self.bin_dir is not None
        return str(self.bin_dir / name)

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        if self._started:
            return self
        t0 = time.monotonic()
        if self.bin_dir is None:
            self.bin_dir = find_bin_dir()
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ControlPlaneError(
                f"control plane binaries missing in {self.bin_dir}: {', '.join(missing)}; "
                f"{HOW_TO_BUILD}"
            )
        self._refuse_if_running()
        self._started = True
        if not self.detached:
            import atexit

            atexit.register(self.stop)
        attempts = 3
        for attempt in range(1, attempts + 1):
            for sub in ("etcd-data", "logs", "pki", "kubeconfigs", "kwok", "home"):
                shutil.rmtree(self.workdir / sub, ignore_errors=True)
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.log_dir.mkdir()
            try:
                self._prepare()
                self._start_etcd()
                self._start_apiserver()
                self._start_controllers()
                self._wait_cluster_ready()
                if self.real_node:
                    self._start_real_node()
                break
            except ControlPlaneError as exc:
                self.stop()
                # A free port picked at start can be taken by someone else before the
                # component binds it: start again on new ports.
                if "address already in use" in str(exc) and attempt < attempts:
                    self._started = True
                    continue
                raise
            except BaseException:
                self.stop()
                raise
        self.startup_seconds = time.monotonic() - t0
        self._write_state()
        return self

    def stop(self) -> None:
        """Stop every process this cluster started, by PID, newest first (the real
        node first of all, while the API server can still delete its pods)."""
        errors = []
        node = realnode.RealNode.from_state(self)
        if node is not None:
            try:
                node.stop()
            except realnode.RealNodeError as exc:
                errors.append(f"real node: {exc}")
        for name in reversed(COMPONENTS):
            proc = self._procs.pop(name, None)
            pid = self.pids.pop(name, None)
            if proc is not None:
                stop_popen(proc)
            elif pid is not None:
                try:
                    _terminate(pid, self._bin(name) if self.bin_dir else None)
                except ControlPlaneError as exc:
                    errors.append(str(exc))
        self._started = False
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        if errors:
            raise ControlPlaneError("; ".join(errors))

    def stop_apiserver(self) -> None:
        """Stop only the kube-apiserver (an API outage; etcd, the controllers and kwok
        keep running and reconnect when it is back). Only for a cluster started by this
        object (not `from_state`)."""
        proc = self._procs.pop("kube-apiserver", None)
        self.pids.pop("kube-apiserver", None)
        if proc is None:
            raise ControlPlaneError("the kube-apiserver was not started by this LocalCluster")
        stop_popen(proc)
        self._write_state()

    def start_apiserver(self) -> None:
        """Start the kube-apiserver again on the same port with the same certificates
        (after `stop_apiserver`); returns once /readyz answers 200."""
        if "kube-apiserver" in self._procs:
            raise ControlPlaneError("the kube-apiserver is already running")
        self._start_apiserver()
        self._write_state()

    @classmethod
    def from_state(cls, workdir: Path) -> LocalCluster:
        """A handle on a cluster started detached (`up`) in `workdir`."""
        workdir = Path(workdir).resolve()
        state_file = workdir / "state.json"
        if not state_file.exists():
            raise ControlPlaneError(f"no cluster state in {workdir} (not started, or stopped)")
        state = json.loads(state_file.read_text())
        cluster = cls(workdir, Path(state["bin_dir"]), detached=True)
        cluster.pids = {k: int(v) for k, v in state["pids"].items()}
        cluster.ports = {k: int(v) for k, v in state["ports"].items()}
        cluster.server = state["server"]
        cluster.node_names = list(state.get("nodes", []))
        cluster._started = True
        return cluster

    def running_components(self) -> dict[str, bool]:
        out = {}
        for name in COMPONENTS:
            proc = self._procs.get(name)
            if proc is not None:
                out[name] = proc.poll() is None
            elif name in self.pids:
                out[name] = _pid_runs(self.pids[name], self._bin(name))
            else:
                out[name] = False
        return out

    def _refuse_if_running(self) -> None:
        if not self.state_file.exists():
            return
        try:
            other = LocalCluster.from_state(self.workdir)
        except (ValueError, KeyError, ControlPlaneError):
            return
        alive = [n for n, up in other.running_components().items() if up]
        if alive:
            raise ControlPlaneError(
                f"a cluster already runs from {self.workdir} ({', '.join(alive)}): "
                "stop it first (make cluster-down)"
            )

    def _write_state(self) -> None:
        state = {
            "bin_dir": str(self.bin_dir),
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "pids": self.pids,
            "ports": self.ports,
            "nodes": self.node_names,
            "startup_seconds": self.startup_seconds,
        }
        self.state_file.write_text(json.dumps(state, indent=2) + "\n")

    # ----------------------------------------------------------------- steps

    def _prepare(self) -> None:
        for name in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok"):
            self.ports[name] = _free_port()
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        pki = self._pki = _PKI(self.workdir / "pki")
        self._certs = {
            "apiserver": pki.issue(
                "apiserver",
                "kube-apiserver",
                server_names=(
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                ),
                server_ips=("127.0.0.1", SERVICE_IP),
            ),
            "apiserver-kubelet-client": pki.issue(
                "apiserver-kubelet-client",
                "kube-apiserver-kubelet-client",
                organizations=("system:masters",),
                client=True,
            ),
            "admin": pki.issue(
                "admin", "spillover-admin", organizations=("system:masters",), client=True
            ),
            "kcm": pki.issue("kcm", "system:kube-controller-manager", client=True),
            "scheduler": pki.issue("scheduler", "system:kube-scheduler", client=True),
            # kwok plays the kubelet of every fake node (their status, leases, pods'
            # status): it gets the admin group rather than one system:node:<name> identity.
            "kwok": pki.issue(
                "kwok", "kwok-controller", organizations=("system:masters",), client=True
            ),
            "kwok-serving": pki.issue(
                "kwok-serving", "kwok", server_names=("localhost",), server_ips=("127.0.0.1",)
            ),
        }
        self._sa = pki.service_account_keys()
        # The aggregation layer's front proxy: its own CA, as kubeadm does. Without it the
        # controllers complain that the requestheader CA bundle is empty.
        front = _PKI(self.workdir / "pki" / "front-proxy")
        self._front_proxy_ca = front.ca
        self._certs["front-proxy-client"] = front.issue(
            "front-proxy-client", "front-proxy-client", client=True
        )
        kc = self.workdir / "kubeconfigs"
        write_kubeconfig(
            self.kubeconfig,
            server=self.server,
            ca=pki.ca.cert,
            user="admin",
            client=self._certs["admin"],
        )
        for comp in ("kcm", "scheduler", "kwok"):
            write_kubeconfig(
                kc / f"{comp}.kubeconfig",
                server=self.server,
                ca=pki.ca.cert,
                user=comp,
                client=self._certs[comp],
            )
        # kwok: stages (committed, from upstream) + the server's config (generated).
        (self.workdir / "kwok").mkdir(exist_ok=True)
        self.kwok_pod_log.write_text("")
        self.kwok_server_config.write_text(
            kwok_server_config(
                self.kwok_pod_log,
                exec_on_host=self.exec_on_host,
                port_forwards=self.port_forwards,
            )
        )
        (self.workdir / "home").mkdir(exist_ok=True)

    def _env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            # kwok would read ~/.kwok/kwok.yaml: give every component an empty home.
            "HOME": str(self.workdir / "home"),
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "GOMAXPROCS": os.environ.get("SPILLOVER_CONTROLPLANE_GOMAXPROCS", "2"),
        }
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        argv = [self._bin(name), *args]
        (self.log_dir / f"{name}.cmdline").write_text(" \\\n  ".join(argv) + "\n")
        with open(self.log_file(name), "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self._env(),
                start_new_session=True,
                preexec_fn=None if self.detached else _pdeathsig_hook(),
            )
        self._procs[name] = proc
        self.pids[name] = proc.pid
        # Recorded at once: `down` finds every PID even if `up` dies half-way.
        self._write_state()

    def _check_alive(self, name: str) -> None:
        proc = self._procs[name]
        if proc.poll() is not None:
            raise ControlPlaneError(
                f"{name} exited with code {proc.returncode} while starting; "
                f"last lines of {self.log_file(name)}:\n{_tail(self.log_file(name))}"
            )

    def _wait(self, what: str, owner: str | None, probe: Any, timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        last: object = None
        while time.monotonic() < deadline:
            if owner is not None:
                self._check_alive(owner)
            try:
                result = probe()
            except Exception as exc:
                last = exc
            else:
                if result:
                    return result
            time.sleep(0.1)
        hint = (
            f"; last lines of {self.log_file(owner)}:\n{_tail(self.log_file(owner))}"
            if owner
            else ""
        )
        raise ControlPlaneError(f"timed out waiting for {what} (last: {last!r}){hint}")

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--initial-cluster-state=new",
                # Test data: durability across power loss is not needed, speed is.
                "--unsafe-no-fsync",
                "--quota-backend-bytes=2147483648",
                "--log-level=warn",
            ],
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def healthy() -> bool:
            with opener.open(f"{client}/health", timeout=2) as resp:
                return bool(json.load(resp).get("health") == "true")

        self._wait("etcd /health", "etcd", healthy)

    def _start_apiserver(self) -> None:
        c = self._certs
        assert self._pki is not None
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                f"--tls-cert-file={c['apiserver'].cert}",
                f"--tls-private-key-file={c['apiserver'].key}",
                f"--client-ca-file={self._pki.ca.cert}",
                "--authorization-mode=Node,RBAC",
                "--anonymous-auth=false",
                "--enable-admission-plugins="
                "NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultTolerationSeconds,"
                "NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
                "ValidatingAdmissionPolicy,ResourceQuota",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={self._sa.cert}",
                f"--service-account-signing-key-file={self._sa.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                # logs / exec / port-forward go to the "kubelet": kwok's server.
                f"--kubelet-client-certificate={c['apiserver-kubelet-client'].cert}",
                f"--kubelet-client-key={c['apiserver-kubelet-client'].key}",
                f"--kubelet-certificate-authority={self._pki.ca.cert}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--requestheader-client-ca-file={self._front_proxy_ca.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={c['front-proxy-client'].cert}",
                f"--proxy-client-key-file={c['front-proxy-client'].key}",
                "--profiling=false",
                f"--cert-dir={self.workdir / 'pki' / 'apiserver-generated'}",
                *self._audit_args(),
            ],
        )
        ctx = ssl.create_default_context(cafile=str(self._pki.ca.cert))
        ctx.load_cert_chain(str(c["admin"].cert), str(c["admin"].key))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx)
        )

        def ready() -> bool:
            try:
                with opener.open(f"{self.server}/readyz", timeout=5) as resp:
                    return bool(resp.status == 200)
            except urllib.error.HTTPError:
                return False

        self._wait("kube-apiserver /readyz", "kube-apiserver", ready)

    def _audit_args(self) -> list[str]:
        """The audit flags with `audit=True`: every request once, at Metadata level, when
        its response is complete (a watch also when it starts)."""
        if not self.audit:
            return []
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
        ]

    def _start_controllers(self) -> None:
        assert self._pki is not None
        kc = self.workdir / "kubeconfigs"
        kcm_kc = kc / "kcm.kubeconfig"
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kcm_kc}",
                f"--authentication-kubeconfig={kcm_kc}",
                f"--authorization-kubeconfig={kcm_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kcm']}",
                f"--cert-dir={self.workdir / 'pki' / 'kcm-generated'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self._sa.key}",
                f"--root-ca-file={self._pki.ca.cert}",
                f"--cluster-signing-cert-file={self._pki.ca.cert}",
                f"--cluster-signing-key-file={self._pki.ca.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--profiling=false",
            ],
        )
        sched_kc = kc / "scheduler.kubeconfig"
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={sched_kc}",
                f"--authentication-kubeconfig={sched_kc}",
                f"--authorization-kubeconfig={sched_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['scheduler']}",
                f"--cert-dir={self.workdir / 'pki' / 'scheduler-generated'}",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        key, value = KWOK_NODE_ANNOTATION
        self._spawn(
            "kwok",
            [
                f"--kubeconfig={kc / 'kwok.kubeconfig'}",
                f"--config={KWOK_STAGES}",
                f"--config={self.workdir / 'kwok' / 'server.yaml'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={key}={value}",
                "--node-ip=127.0.0.1",
                f"--node-port={self.ports['kwok']}",
                f"--server-address=127.0.0.1:{self.ports['kwok']}",
                f"--tls-cert-file={self._certs['kwok-serving'].cert}",
                f"--tls-private-key-file={self._certs['kwok-serving'].key}",
                f"--cidr={POD_CIDR}",
                "--node-lease-duration-seconds=40",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # their self-signed serving certs; loopback only
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure)
        )

        def healthz(port: int) -> Any:
            def probe() -> bool:
                try:
                    with opener.open(f"https://127.0.0.1:{port}/healthz", timeout=2) as resp:
                        return bool(resp.status == 200)
                except urllib.error.HTTPError:
                    return False

            return probe

        self._wait(
            "kube-controller-manager /healthz",
            "kube-controller-manager",
            healthz(self.ports["kcm"]),
        )
        self._wait("kube-scheduler /healthz", "kube-scheduler", healthz(self.ports["scheduler"]))
        self._wait("kwok /healthz", "kwok", healthz(self.ports["kwok"]))

    def _start_real_node(self) -> None:
        try:
            realnode.RealNode(self).start(kubernetes_module_dir())
        except realnode.RealNodeError as exc:
            raise ControlPlaneError(f"real node: {exc}") from exc

    def _wait_cluster_ready(self) -> None:
        from kubernetes import client

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            key, value = KWOK_NODE_ANNOTATION
            for name in self.node_names:
                node = client.V1Node(
                    metadata=client.V1ObjectMeta(
                        name=name,
                        annotations={key: value, "node.alpha.kubernetes.io/ttl": "0"},
                        labels={
                            "type": "kwok",
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "kubernetes.io/role": "agent",
                            "node-role.kubernetes.io/agent": "",
                        },
                    ),
                    status=client.V1NodeStatus(
                        allocatable={"cpu": "32", "memory": "256Gi", "pods": "110"},
                        capacity={"cpu": "32", "memory": "256Gi", "pods": "110"},
                    ),
                )
                core.create_node(node)

            def nodes_ready() -> bool:
                for name in self.node_names:
                    node = core.read_node(name)
                    conds = {c.type: c.status for c in (node.status.conditions or [])}
                    if conds.get("Ready") != "True" or node.spec.taints:
                        return False
                return True

            # The API server taints a new Node not-ready; kube-controller-manager's node
            # lifecycle controller lifts the taint once kwok has made it Ready. That
            # controller starts among the last (~4 s, each controller gets its own
            # ServiceAccount token first), so this also waits for the controllers.
            self._wait("the kwok nodes to be Ready and untainted", "kwok", nodes_ready)

            def default_sa() -> bool:
                core.read_namespaced_service_account("default", "default")
                core.read_namespaced_config_map("kube-root-ca.crt", "default")
                return True

            self._wait(
                "the default ServiceAccount and kube-root-ca.crt (kube-controller-manager)",
                "kube-controller-manager",
                default_sa,
            )

    # ----------------------------------------------------------------- helpers

    def api_client(self) -> Any:
        """A new `kubernetes.client.ApiClient` for the admin (system:masters); close it."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    @staticmethod
    def free_port() -> int:
        return _free_port()

    def node_credentials(
        self, name: str, directory: Path, *, server_ips: tuple[str, ...]
    ) -> NodeCredentials:
        """A kubelet's identity for node `name` (client certificate in the system:nodes
        group, as the Node authorizer wants) and its serving certificate for `server_ips`,
        signed by this cluster's CA."""
        assert self._pki is not None, "node_credentials needs a cluster started here"
        client = self._pki.issue(
            f"kubelet-{name}", f"system:node:{name}", organizations=("system:nodes",), client=True
        )
        serving = self._pki.issue(
            f"kubelet-{name}-serving",
            f"system:node:{name}",
            server_names=(name, "localhost"),
            server_ips=server_ips,
        )
        kubeconfig = write_kubeconfig(
            directory / "kubeconfig",
            server=self.server,
            ca=self.ca_file,
            user=f"node-{name}",
            client=client,
        )
        return NodeCredentials(kubeconfig, serving)

    def user_kubeconfig(
        self, user: str, *, groups: tuple[str, ...] = (), namespace: str | None = None
    ) -> Path:
        """A kubeconfig for a person: a client certificate with CN `user` (and O `groups`)
        signed by this cluster's CA, so the API server authenticates the requests as
        `user`, with no RBAC beyond what is bound to that name (and system:authenticated)."""
        assert self._pki is not None, "user_kubeconfig needs a cluster started here"
        safe = re.sub(r"[^a-z0-9-]+", "-", user.lower()).strip("-") or "user"
        pair = self._pki.issue(f"user-{safe}", user, organizations=groups, client=True)
        return write_kubeconfig(
            self.workdir / "kubeconfigs" / f"user-{safe}.kubeconfig",
            server=self.server,
            ca=self.ca_file,
            user=user,
            client=pair,
            namespace=namespace,
        )

    def service_account_kubeconfig(
        self, namespace: str, name: str, *, expiration_seconds: int = 24 * 3600
    ) -> Path:
        """A kubeconfig holding a TokenRequest token for ServiceAccount namespace/name:
        whoever uses it has exactly that ServiceAccount's RBAC."""
        from kubernetes import client

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            resp = core.create_namespaced_service_account_token(
                name,
                namespace,
                client.AuthenticationV1TokenRequest(
                    spec=client.V1TokenRequestSpec(
                        audiences=[SA_ISSUER], expiration_seconds=expiration_seconds
                    )
                ),
            )
        path = self.workdir / "kubeconfigs" / f"sa-{namespace}-{name}.kubeconfig"
        return write_kubeconfig(
            path,
            server=self.server,
            ca=self.ca_file,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=resp.status.token,
            namespace=namespace,
        )

    def create_namespace(
        self, prefix: str = "test", *, labels: dict[str, str] | None = None
    ) -> str:
        """Create a namespace with a unique name starting with `prefix`; wait until its
        default ServiceAccount exists (pods can be created); return its name."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        base = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:50].strip("-") or "test"
        name = f"{base}-{secrets.token_hex(3)}"
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
            )
            deadline = time.monotonic() + 30
            while True:
                try:
                    core.read_namespaced_service_account("default", name)
                    break
                except ApiException as exc:
                    if exc.status != 404 or time.monotonic() > deadline:
                        raise
                time.sleep(0.05)
        return name

    def delete_namespace(self, name: str, *, wait: bool = False, timeout: float = 60) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            try:
                core.delete_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                return
            deadline = time.monotonic() + timeout
            while wait:
                try:
                    core.read_namespace(name)
                except ApiException as exc:
                    if exc.status == 404:
                        return
                    raise
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"namespace {name} still exists after {timeout}s")
                time.sleep(0.2)


# --------------------------------------------------------------------------- CLI


def _default_workdir() -> Path:
    return Path(os.environ.get("SPILLOVER_CLUSTER_DIR", DEFAULT_WORKDIR))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="localcluster.py",
        description="Run the local Kubernetes control plane (etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, kwok) on 127.0.0.1.",
    )
    parser.add_argument("command", choices=["up", "down", "env", "status", "load-image"])
    parser.add_argument(
        "image", nargs="?", help="load-image: an image in podman's store, copied to the real node"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=_default_workdir(),
        help="state, certificates, logs (default: $SPILLOVER_CLUSTER_DIR or %(default)s)",
    )
    parser.add_argument("--bin-dir", type=Path, default=None, help="default: build.sh's")
    parser.add_argument("--nodes", type=int, default=1, help="fake kwok nodes (up)")
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="also a real node (kubelet, containerd, runc) tainted and labelled "
        "spillover.clerum.io/real-node; needs root and `make host-deps` (up)",
    )
    args = parser.parse_args(argv)
    workdir: Path = args.workdir.resolve()

    try:
        if args.command == "up":
            cluster = LocalCluster(
                workdir, args.bin_dir, nodes=args.nodes, detached=True, real_node=args.real_node
            )
            cluster.start()
            print(
                f"control plane up in {cluster.startup_seconds:.1f}s: {cluster.server}\n"
                f"  pids: {json.dumps(cluster.pids)}\n"
                f"  logs: {cluster.log_dir}\n"
                f"  export KUBECONFIG={cluster.kubeconfig}",
                file=sys.stderr,
            )
            print(f"export KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "down":
            if not (workdir / "state.json").exists():
                print(f"no cluster running from {workdir}", file=sys.stderr)
                return 0
            cluster = LocalCluster.from_state(workdir)
            pids = dict(cluster.pids)
            cluster.stop()
            print(f"stopped {json.dumps(pids)}", file=sys.stderr)
        elif args.command == "load-image":
            if not args.image:
                print(
                    "load-image needs an IMAGE (e.g. localhost/spillover-operator:dev)",
                    file=sys.stderr,
                )
                return 2
            cluster = LocalCluster.from_state(workdir)
            node = realnode.RealNode.from_state(cluster)
            if node is None:
                print(f"no real node in {workdir}: make cluster-up REAL_NODE=1", file=sys.stderr)
                return 1
            t0 = time.monotonic()
            node.load_image(args.image)
            print(
                f"loaded {args.image} into {node.name} in {time.monotonic() - t0:.1f}s",
                file=sys.stderr,
            )
        elif args.command == "env":
            kubeconfig = workdir / "kubeconfig"
            if not (workdir / "state.json").exists():
                print(f"no cluster running from {workdir}: make cluster-up", file=sys.stderr)
                return 1
            print(f"export KUBECONFIG={kubeconfig}")
        elif args.command == "status":
            cluster = LocalCluster.from_state(workdir)
            running = cluster.running_components()
            for name, up in running.items():
                print(f"{name:26} {'running' if up else 'STOPPED'} pid {cluster.pids.get(name)}")
            print(f"server {cluster.server}\nkubeconfig {cluster.kubeconfig}")
            return 0 if all(running.values()) else 1
    except (ControlPlaneError, realnode.RealNodeError) as exc:
        print(f"localcluster: {exc}", file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def local_cluster(workdir: Path, bin_dir: Path | None = None) -> Iterator[LocalCluster]:
    cluster = LocalCluster(workdir, bin_dir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
