"""A real node beside the kwok nodes: the upstream kubelet on containerd and runc.

kwok's pods are not processes. The real node runs containers: the operator pod from the
shipped manifests, real mcp-host processes reading their own environment. It joins the
local control plane (``LocalCluster(real_node=True)``, ``make cluster-up REAL_NODE=1``)
as node ``real-node-0``, labelled and tainted ``spillover.clerum.io/real-node``: nothing
lands on it unless it asks to (a nodeSelector and a toleration), so the kwok tests are
unchanged.

Parts: the kubelet built by build.sh from the pinned k8s.io/kubernetes module; Debian's
containerd, runc and CNI plugins (``make host-deps`` installs them; root is needed, as
for any kubelet); a pause image compiled from ``build/pause/linux/pause.c`` of the same
module (there is no registry to pull it from).

Networking, with no kube-proxy: pods sit on a bridge of their own (``spill-br0``,
10.245.0.0/24, gateway 10.245.0.1 = the node's InternalIP; the kubelet refuses a
loopback node IP). One DNAT rule (chain ``SPILLOVER-REALNODE``) sends the ``kubernetes``
Service address 10.96.0.1:443 to the API server on 127.0.0.1, with route_localnet set on
that bridge only (it goes away with the bridge). Pods reach nothing else.

What it changes on the host, and ``stop`` undoes, in this order: pods (deleted through
the API, so the kubelet tears their sandboxes down), the kubelet, what is left of the
containers, containerd, mounts under its directories, the node's cgroups
(``cgroupRoot /spillover-<node>``), the iptables chains the kubelet makes
(KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT; only those that were not there
before) and ours, the bridge, the sysctls the kubelet and the CNI plugins set (put back
to the values read before), and default paths they created (/run/containerd,
/var/lib/cni, ...). What was created is recorded in ``<workdir>/realnode/state.json``
as it is made, so ``down`` undoes it even after a crash half-way through ``up``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:  # imported as controlplane.realnode (tests) or as a script's neighbour (CLI)
    from . import hoststate
    from .processes import stop_popen, tail, terminate_pid
except ImportError:
    import hoststate  # type: ignore[no-redef]
    from processes import stop_popen, tail, terminate_pid  # type: ignore[no-redef]

if TYPE_CHECKING:
    from .localcluster import LocalCluster

NODE_NAME = "real-node-0"
NODE_LABEL = "spillover.clerum.io/real-node"
BRIDGE = "spill-br0"
SUBNET = "10.245.0.0/24"
GATEWAY = "10.245.0.1"
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
CHAIN = "SPILLOVER-REALNODE"
KUBELET_CHAINS = (
    ("filter", "KUBE-FIREWALL"),
    ("filter", "KUBE-KUBELET-CANARY"),
    ("nat", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-IPTABLES-HINT"),
)
HOST_PARTS = {
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "iptables": "iptables",
    "nft": "nftables",
    "podman": "podman",
    "gcc": "gcc",
}
HOW_TO_INSTALL = "run `make host-deps` as root (tests/controlplane/setup-host.sh)"
CACHE = Path(
    os.environ.get("SPILLOVER_REALNODE_CACHE", Path.home() / ".cache/spillover-ops/realnode")
)


class RealNodeError(RuntimeError):
    """The real node could not be started or stopped."""


def missing_host_parts() -> list[str]:
    """The Debian packages a real node needs that this host lacks."""
    out = set()
    for cmd, package in HOST_PARTS.items():
        found = os.access(cmd, os.X_OK) if cmd.startswith("/") else shutil.which(cmd)
        if not found:
            out.add(package)
    return sorted(out)


def _run(argv: list[str], *, check: bool = True, timeout: float = 120) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()[-800:]
        raise RealNodeError(f"{' '.join(argv)} exited {proc.returncode}: {said}")
    return proc.stdout


def pause_image(module_dir: Path) -> Path:
    """An image archive holding `pause` compiled from the pinned module's pause.c, built
    once per source into the cache (podman: FROM scratch, one static binary)."""
    source = module_dir / "build" / "pause" / "linux" / "pause.c"
    if not source.is_file():
        raise RealNodeError(f"no {source}: run `make controlplane` (it downloads the module)")
    digest = hashlib.sha256(source.read_bytes() + SANDBOX_IMAGE.encode()).hexdigest()[:16]
    archive = CACHE / f"pause-{digest}.tar"
    if archive.is_file():
        return archive
    CACHE.mkdir(parents=True, exist_ok=True)
    build = CACHE / f"pause-build-{os.getpid()}"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    try:
        version = SANDBOX_IMAGE.rsplit(":", 1)[1]
        _run(
            [
                "gcc",
                "-Os",
                "-static",
                f"-DVERSION=v{version}-spillover",
                "-o",
                str(build / "pause"),
                str(source),
            ]
        )
        _run(["strip", str(build / "pause")], check=False)
        (build / "Containerfile").write_text(
            'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
        )
        _run(["podman", "build", "--quiet", "--network", "none", "-t", SANDBOX_IMAGE, str(build)])
        tmp = archive.with_suffix(f".tmp{os.getpid()}")
        _run(
            [
                "podman",
                "save",
                "--quiet",
                "--format",
                "docker-archive",
                "-o",
                str(tmp),
                SANDBOX_IMAGE,
            ]
        )
        tmp.rename(archive)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return archive


class RealNode:
    """containerd + the kubelet for one node of `cluster` (see the module doc)."""

    def __init__(self, cluster: LocalCluster, name: str = NODE_NAME) -> None:
        self.cluster = cluster
        self.name = name
        self.dir = cluster.workdir / "realnode"
        self.state_file = self.dir / "state.json"
        self.state: dict[str, Any] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------- paths

    @property
    def data(self) -> Path:
        """What containerd and the kubelet keep (roots, sockets, CNI state): a short path
        of its own, since they make unix sockets under it (at most 104 bytes; a pytest
        tmp dir is longer). Made by `start`, removed by `stop`; logs and state.json stay
        in the cluster's workdir."""
        digest = hashlib.sha256(str(self.dir).encode()).hexdigest()[:10]
        return Path("/var/tmp") / f"spillover-node-{digest}"

    @property
    def containerd_socket(self) -> Path:
        return self.data / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"/spillover-{self.name}"

    def log_file(self, name: str) -> Path:
        return self.dir / "logs" / f"{name}.log"

    # ------------------------------------------------------------- state

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        tmp.replace(self.state_file)

    def _record(self, key: str, value: Any) -> None:
        self.state[key] = value
        self._save()

    @classmethod
    def from_state(cls, cluster: LocalCluster) -> RealNode | None:
        node = cls(cluster)
        if not node.state_file.exists():
            return None
        node.state = json.loads(node.state_file.read_text())
        node.name = node.state.get("name", NODE_NAME)
        return node

    # ------------------------------------------------------------- start

    def check_host(self) -> None:
        missing = missing_host_parts()
        if missing:
            raise RealNodeError(
                f"a real node needs Debian packages this host lacks: {', '.join(missing)}; "
                f"{HOW_TO_INSTALL}"
            )
        if os.geteuid() != 0:
            raise RealNodeError(
                "a real node needs root (the kubelet and containerd manage mounts, cgroups "
                "and network namespaces): run the tests as root, as CI does"
            )

    def start(self, module_dir: Path) -> None:
        self.check_host()
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            raise RealNodeError(
                f"the bridge {BRIDGE} exists: another real node runs on this host (one at a "
                "time); stop it first (make cluster-down, with its SPILLOVER_CLUSTER_DIR)"
            )
        if self.state_file.exists():
            raise RealNodeError(
                f"{self.state_file} exists: a real node from an earlier run was not stopped; "
                "run `make cluster-down` first"
            )
        t0 = time.monotonic()
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "logs").mkdir(parents=True)
        if self.data.exists():
            raise RealNodeError(f"{self.data} exists: left by a real node not stopped")
        self.state = {
            "name": self.name,
            "pids": {},
            "sysctls": {k: hoststate.read_sysctl(k) for k in hoststate.SYSCTLS},
            "paths_before": {p: os.path.lexists(p) for p in hoststate.WELL_KNOWN_PATHS},
            "nft_tables_before": hoststate.nft_tables(),
            "chains_before": sorted(
                hoststate.iptables_chains("iptables-save")
                | {f"ip6:{c}" for c in hoststate.iptables_chains("ip6tables-save")}
            ),
        }
        self._save()
        try:
            self._record("data", str(self.data))
            self.data.mkdir(mode=0o700)
            archive = pause_image(module_dir)
            self._network()
            self._start_containerd()
            self._import(archive)
            self._start_kubelet()
            self._wait_ready()
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop()
            raise
        self._record("startup_seconds", round(time.monotonic() - t0, 2))

    def _network(self) -> None:
        self._record("bridge", BRIDGE)
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])
        # Lets the DNAT below reach 127.0.0.1 for packets arriving on this bridge only.
        hoststate.write_sysctl(f"net.ipv4.conf.{BRIDGE}.route_localnet", "1")
        api_port = self.cluster.ports["apiserver"]
        self._record("chain", CHAIN)
        _run(["iptables", "-t", "nat", "-N", CHAIN])
        _run(
            [
                "iptables",
                "-t",
                "nat",
                "-A",
                CHAIN,
                "-d",
                "10.96.0.1/32",
                "-p",
                "tcp",
                "--dport",
                "443",
                "-j",
                "DNAT",
                "--to-destination",
                f"127.0.0.1:{api_port}",
            ]
        )
        _run(["iptables", "-t", "nat", "-I", "PREROUTING", "-i", BRIDGE, "-j", CHAIN])

    def _spawn(self, name: str, argv: list[str]) -> None:
        (self.dir / "logs" / f"{name}.cmdline").write_text(" \\\n  ".join(argv) + "\n")
        with open(self.log_file(name), "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
                env={
                    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": str(self.dir),
                    "NO_PROXY": "*",
                    "no_proxy": "*",
                },
            )
        self._procs[name] = proc
        self.state["pids"][name] = proc.pid
        self.state.setdefault("argv0", {})[name] = argv[0]
        self._save()

    def _wait(self, what: str, owner: str, probe: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            proc = self._procs.get(owner)
            if proc is not None and proc.poll() is not None:
                raise RealNodeError(
                    f"{owner} exited {proc.returncode} while starting; last lines of "
                    f"{self.log_file(owner)}:\n{tail(self.log_file(owner))}"
                )
            try:
                if probe():
                    return
            except Exception as exc:
                last = exc
            time.sleep(0.1)
        raise RealNodeError(
            f"timed out waiting for {what} (last: {last!r}); last lines of "
            f"{self.log_file(owner)}:\n{tail(self.log_file(owner))}"
        )

    def _start_containerd(self) -> None:
        d = self.data / "containerd"
        (d / "root").mkdir(parents=True)
        cni = self.data / "cni"
        (cni / "net.d").mkdir(parents=True)
        (cni / "net.d" / "10-spillover.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "spillover-realnode",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": False,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "dataDir": str(cni / "ipam"),
                                "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                            },
                        },
                    ],
                },
                indent=2,
            )
        )
        # The CRI plugin of containerd 1.6 (config version 2). Everything it writes goes
        # under self.dir, but for the shims' sockets (/run/containerd/s, fixed).
        config = f"""version = 2
root = "{d / "root"}"
state = "{d / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.data / "containerd.sock.ttrpc"}"
[debug]
  level = "warn"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/bin/runc"
        Root = "{d / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni / "net.d"}"
"""
        (d / "config.toml").write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(d / "config.toml")])
        self._wait(
            "containerd's socket",
            "containerd",
            lambda: self.containerd_socket.is_socket() and self._ctr("version", check=False),
        )

    def _ctr(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        return _run(
            ["ctr", "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args],
            check=check,
            timeout=timeout,
        )

    def _import(self, archive: Path) -> None:
        self._ctr("images", "import", "--all-platforms", str(archive))

    def task_pid(self, container_id: str) -> int:
        """The host PID of a running container's process (from containerd)."""
        for line in self._ctr("tasks", "ls").splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == container_id:
                return int(fields[1])
        raise RealNodeError(f"no running task {container_id} in the node's containerd")

    def load_image(self, image: str, tool: str = "podman") -> None:
        """Copy `image` from podman's (or docker's) store into the node's containerd."""
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = CACHE / f"load-{os.getpid()}.tar"
        try:
            _run(
                [tool, "save", "--quiet", "--format", "docker-archive", "-o", str(tmp), image]
                if tool == "podman"
                else [tool, "save", "-o", str(tmp), image],
                timeout=300,
            )
            self._import(tmp)
        finally:
            tmp.unlink(missing_ok=True)

    def _make_cgroup_root(self) -> None:
        """The kubelet wants its cgroupRoot in every hierarchy before it starts."""
        self._record("cgroup_root", self.cgroup_root)
        name = self.cgroup_root.strip("/")
        for hierarchy in sorted(hoststate.CGROUP_ROOT.iterdir()):
            if not (hierarchy / "cgroup.procs").exists():
                continue
            (hierarchy / name).mkdir(exist_ok=True)
            if (hierarchy / "cpuset.cpus").exists():  # v1 cpuset: empty until given
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (hierarchy / name / f).write_text((hierarchy / f).read_text())

    def _start_kubelet(self) -> None:
        self._make_cgroup_root()
        c = self.cluster
        kd = self.data / "kubelet"
        kd.mkdir()
        self._share_root_dir(kd / "root")
        creds = c.node_credentials(self.name, kd, server_ips=(GATEWAY,))
        (kd / "resolv.conf").write_text("")
        port, healthz = c.free_port(), c.free_port()
        self._record("kubelet_port", port)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": GATEWAY,
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "tlsCertFile": str(creds.serving.cert),
            "tlsPrivateKeyFile": str(creds.serving.key),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(c.ca_file)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "podLogsDir": str(self.data / "pod-logs"),
            "resolvConf": str(kd / "resolv.conf"),
            "registerWithTaints": [{"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}],
            "maxPods": 30,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "syncFrequency": "10s",
            "fileCheckFrequency": "0s",
            "nodeStatusUpdateFrequency": "5s",
            "shutdownGracePeriod": "0s",
        }
        (kd / "config.json").write_text(json.dumps(config, indent=2))
        self._spawn(
            "kubelet",
            [
                c._bin("kubelet"),
                f"--config={kd / 'config.json'}",
                f"--kubeconfig={creds.kubeconfig}",
                f"--root-dir={kd / 'root'}",
                f"--cert-dir={kd / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={GATEWAY}",
                f"--node-labels={NODE_LABEL}=true",
                "--v=1",
            ],
        )

    @staticmethod
    def _share_root_dir(root: Path) -> None:
        """Make the kubelet's root dir a shared mount of its own before the kubelet starts.

        Left to itself the kubelet bind-mounts its root dir onto itself (MakeRShared) while
        its pod-resources server, started in parallel, renames a socket inside that dir; a
        rename whose two lookups straddle the new mount fails with EXDEV and the kubelet
        exits ("Failed to create listener for podResources endpoint", seen once in CI).
        Finding the dir already shared, the kubelet mounts nothing. `stop` unmounts it with
        every other mount under the node's data dir."""
        root.mkdir(parents=True, exist_ok=True)
        _run(["mount", "--bind", str(root), str(root)])
        _run(["mount", "--make-rshared", str(root)])

    def _wait_ready(self) -> None:
        from kubernetes import client

        with self.cluster.api_client() as api:
            core = client.CoreV1Api(api)

            def ready() -> bool:
                node = core.read_node(self.name)
                conds = {x.type: x.status for x in (node.status.conditions or [])}
                return conds.get("Ready") == "True"

            self._wait(f"node {self.name} to be Ready", "kubelet", ready, timeout=120)

    # ------------------------------------------------------------- stop

    def stop(self) -> None:
        """Undo everything `start` did (see the module doc), as far as it got."""
        errors: list[str] = []

        def attempt(what: str, fn: Any) -> None:
            try:
                fn()
            except Exception as exc:
                errors.append(f"{what}: {exc}")

        if self.state.get("pids", {}).get("kubelet"):
            attempt("deleting the node's pods", self._delete_pods)
        attempt("stopping the kubelet", lambda: self._stop_process("kubelet"))
        attempt("removing containers", self._remove_containers)
        attempt("stopping containerd", lambda: self._stop_process("containerd"))
        attempt("unmounting", self._unmount)
        attempt("removing cgroups", self._remove_cgroups)
        attempt("removing iptables chains", self._remove_chains)
        if self.state.get("bridge"):
            attempt("removing the bridge", lambda: _run(["ip", "link", "del", BRIDGE], check=False))
        attempt("restoring sysctls", self._restore_sysctls)
        attempt("removing default paths", self._remove_paths)
        if self.state.get("data"):
            shutil.rmtree(self.state["data"], ignore_errors=True)
        attempt("deleting the Node", self._delete_node)
        if errors:
            raise RealNodeError("; ".join(errors))
        self.state_file.unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _delete_pods(self) -> None:
        from kubernetes import client

        try:
            api = self.cluster.api_client()
        except Exception:
            return
        with api:
            core = client.CoreV1Api(api)
            try:
                pods = core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={self.name}", _request_timeout=5
                ).items
            except Exception:
                return  # the API server is gone: _remove_containers does it by hand
            for pod in pods:
                with contextlib.suppress(Exception):
                    core.delete_namespaced_pod(
                        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=1
                    )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                left = core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={self.name}"
                ).items
                # Pods of controllers come back: stop once the kubelet has nothing
                # left running of the ones it had.
                if not left or all(
                    p.metadata.deletion_timestamp is None and p.status.phase == "Pending"
                    for p in left
                ):
                    break
                time.sleep(0.2)

    def _stop_process(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        pid = self.state.get("pids", {}).get(name)
        if proc is not None:
            stop_popen(proc, timeout=15)
        elif pid:
            terminate_pid(pid, self.state.get("argv0", {}).get(name), timeout=15)
        self.state.get("pids", {}).pop(name, None)
        self._save()

    def _shims(self) -> list[int]:
        """containerd-shim processes serving our containerd (their -address names it)."""
        out = []
        sock = str(self.containerd_socket)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and sock.encode() in argv:
                out.append(int(entry.name))
        return out

    def _remove_containers(self) -> None:
        runc_root = self.data / "containerd" / "runc" / "k8s.io"
        if runc_root.is_dir():
            listing = _run(["runc", "--root", str(runc_root), "list", "-q"], check=False)
            for cid in listing.split():
                _run(["runc", "--root", str(runc_root), "kill", cid, "KILL"], check=False)
                _run(["runc", "--root", str(runc_root), "delete", "--force", cid], check=False)
        for pid in self._shims():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self._shims() and time.monotonic() < deadline:
            time.sleep(0.1)

    def _unmount(self) -> None:
        bases = [str(self.dir), str(self.data)]

        def ours() -> list[str]:
            return [
                m for m in hoststate.mountpoints() for b in bases if m == b or m.startswith(b + "/")
            ]

        for target in sorted(set(ours()), key=len, reverse=True):
            _run(["umount", "--lazy", target], check=False)
        left = ours()
        if left:
            raise RealNodeError(f"still mounted: {', '.join(left[:5])}")

    def _remove_cgroups(self) -> None:
        root = self.cgroup_root.strip("/")
        left = []
        for hierarchy in (
            sorted(hoststate.CGROUP_ROOT.iterdir()) if hoststate.CGROUP_ROOT.is_dir() else []
        ):
            top = hierarchy / root
            if not top.is_dir():
                continue
            dirs = sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            )
            for d in [*dirs, top]:
                for _ in range(50):
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)
            if top.exists():
                left.append(str(top))
        if left:
            raise RealNodeError(f"cgroups still there (processes left in them?): {', '.join(left)}")

    def _remove_chains(self) -> None:
        before = set(self.state.get("chains_before", []))
        if self.state.get("chain"):
            _run(
                ["iptables", "-t", "nat", "-D", "PREROUTING", "-i", BRIDGE, "-j", CHAIN],
                check=False,
            )
            _run(["iptables", "-t", "nat", "-F", CHAIN], check=False)
            _run(["iptables", "-t", "nat", "-X", CHAIN], check=False)
        for command, prefix in (("iptables", ""), ("ip6tables", "ip6:")):
            if shutil.which(command) is None:
                continue
            present = hoststate.iptables_chains(f"{command}-save")
            for table, chain in KUBELET_CHAINS:
                if f"{prefix}{table}/{chain}" in before or f"{table}/{chain}" not in present:
                    continue
                if chain == "KUBE-FIREWALL":
                    for parent in ("INPUT", "OUTPUT"):
                        jump = ["-t", table, "%s", parent, "-j", chain]
                        while (
                            subprocess.run(
                                [command, *(a.replace("%s", "-C") for a in jump)],
                                capture_output=True,
                                check=False,
                            ).returncode
                            == 0
                        ):
                            _run([command, *(a.replace("%s", "-D") for a in jump)])
                _run([command, "-t", table, "-F", chain], check=False)
                _run([command, "-t", table, "-X", chain], check=False)
        # iptables-nft keeps a table once a chain was made in it: remove the ones that
        # were not there before and hold nothing now.
        tables_before = set(self.state.get("nft_tables_before", []))
        for command, family in (("iptables-save", "ip"), ("ip6tables-save", "ip6")):
            if shutil.which(command) is None or shutil.which("nft") is None:
                continue
            for table in hoststate.empty_iptables_tables(command):
                if (
                    f"{family} {table}" not in tables_before
                    and f"{family} {table}" in hoststate.nft_tables()
                ):
                    _run(["nft", "delete", "table", family, table], check=False)
        left = [
            c
            for c in hoststate.iptables_chains("iptables-save")
            if c.split("/")[1] in {CHAIN, *(k for _, k in KUBELET_CHAINS)} and c not in before
        ]
        if left:
            raise RealNodeError(f"iptables chains still there: {', '.join(left)}")

    def _restore_sysctls(self) -> None:
        for key, value in self.state.get("sysctls", {}).items():
            if value is not None and hoststate.read_sysctl(key) != value:
                hoststate.write_sysctl(key, value)

    def _remove_paths(self) -> None:
        for path, existed in self.state.get("paths_before", {}).items():
            if existed or not os.path.lexists(path):
                continue
            p = Path(path)
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()

    def _delete_node(self) -> None:
        from kubernetes import client

        with contextlib.suppress(Exception), self.cluster.api_client() as api:
            client.CoreV1Api(api).delete_node(self.name, _request_timeout=5)
