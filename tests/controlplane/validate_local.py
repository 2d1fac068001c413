"""`make validate-local`: the Stage 1 rehearsal on the local test cluster's real node.

Expects what the make target sets up first: the cluster (`make cluster-up
REAL_NODE=1`), the operator as a pod (`make deploy-local`), the WRC stand-in with one
mcp-host Deployment per recipe of the matrix (`make platform-local`) and the policy.
Here: a real Prometheus on 127.0.0.1:PORT (the `local` profile's URL) scraping the
mcp-host pods, whose addresses a thread here follows through the API server (every
rollout replaces them) into Prometheus' file discovery, then `spillover-harness run --stage
minikube --profile local` through the operator, then Prometheus is stopped whatever
happened (Ctrl-C included). The harness's exit code is this script's.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from prometheus.server import (  # noqa: E402
    PrometheusMissing,
    PrometheusServer,
    PrometheusStartError,
    file_targets,
    write_file_targets,
)

from controlplane.localcluster import DEFAULT_WORKDIR  # noqa: E402

MCP_HOST_SELECTOR = "app.kubernetes.io/name=mcp-host"
MCP_HOST_PORT = 8080
DEFAULT_PORT = 9391  # harness/spillover_harness/profile/shipped/local.yaml: prometheus.url
SCRAPE_INTERVAL_S = 2.0  # the profile's prometheus.scrape_interval_s


def _current_context(kubeconfig: Path) -> str:
    import yaml

    return str(yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))["current-context"])


def mcp_host_targets(pods: list[dict[str, Any]], namespace: str) -> list[dict[str, object]]:
    """The file_sd target groups of the Running mcp-host pods not being deleted (one group
    per pod, with the `namespace` and `pod` labels a Kubernetes discovery would give)."""
    groups: list[dict[str, object]] = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or not status.get("podIP"):
            continue
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        groups.append(
            {
                "targets": [f"{status['podIP']}:{MCP_HOST_PORT}"],
                "labels": {"namespace": namespace, "pod": str(pod["metadata"]["name"])},
            }
        )
    return sorted(groups, key=lambda g: str(g["labels"]))


class TargetFollower:
    """Keeps Prometheus' target file equal to the Running mcp-host pods (every second)."""

    def __init__(self, kubeconfig: Path, namespace: str, path: Path) -> None:
        from spillover_operator.client import connect

        self.conn = connect(str(kubeconfig), namespace=namespace, field_manager="validate-local")
        self.namespace, self.path = namespace, path
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="targets", daemon=True)
        self._last: list[dict[str, object]] | None = None
        self.nodes: list[str] = []

    def refresh(self) -> int:
        from spillover_operator.client import list_pods

        pods = list_pods(self.conn, MCP_HOST_SELECTOR)
        self.nodes = sorted({str(p["spec"]["nodeName"]) for p in pods if p["spec"].get("nodeName")})
        groups = mcp_host_targets(pods, self.namespace)
        if groups != self._last:
            write_file_targets(self.path, groups)
            self._last = groups
        return len(groups)

    def _loop(self) -> None:
        from spillover_operator.client import ClientError

        while not self.stop.wait(1.0):
            try:
                self.refresh()
            except ClientError as exc:  # the API server restarting: keep the last list
                print(f"validate-local: targets not refreshed: {exc}", file=sys.stderr)


def kubelet_scrape_configs(kubeconfig: Path, node: str, workdir: Path) -> list[dict[str, object]]:
    """Jobs scraping the real node's kubelet through the API server's node proxy, as the
    kubeconfig's user (the `local` profile's `memory` queries read them):
    `kubelet-resource` (`/metrics/resource`: each container's working set, what
    metrics-server reads; this kubelet's cAdvisor has no per-container series, its
    containerd is not at the default socket) and `kubelet-cadvisor` (`/metrics/cadvisor`:
    the pods' memory limits). The kubeconfig's certificates are written to `workdir`
    (0600) because Prometheus reads files."""
    import base64
    import urllib.parse

    import yaml

    doc = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    context = next(c["context"] for c in doc["contexts"] if c["name"] == doc["current-context"])
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in doc["users"] if u["name"] == context["user"])
    files = {
        "ca_file": ("ca.crt", cluster["certificate-authority-data"]),
        "cert_file": ("client.crt", user["client-certificate-data"]),
        "key_file": ("client.key", user["client-key-data"]),
    }
    tls: dict[str, str] = {}
    for key, (name, data) in files.items():
        path = workdir / name
        path.touch(mode=0o600)
        path.write_bytes(base64.b64decode(data))
        tls[key] = str(path)
    server = urllib.parse.urlsplit(cluster["server"])
    return [
        {
            "job_name": f"kubelet-{endpoint}",
            "scheme": "https",
            "metrics_path": f"/api/v1/nodes/{node}/proxy/metrics/{endpoint}",
            "static_configs": [{"targets": [server.netloc]}],
            "tls_config": tls,
            "scrape_interval": f"{SCRAPE_INTERVAL_S:g}s",
            "scrape_timeout": f"{SCRAPE_INTERVAL_S:g}s",
        }
        for endpoint in ("resource", "cadvisor")
    ]


def _wait_scraped(prometheus: PrometheusServer, follower: TargetFollower) -> None:
    """Until Prometheus scrapes exactly the pods the follower lists, each one up."""
    deadline = time.monotonic() + 60
    last: object = None
    while time.monotonic() < deadline:
        follower.refresh()
        want = {t for g in follower._last or [] for t in g["targets"]}  # type: ignore[attr-defined]
        try:
            data = prometheus.api("/api/v1/targets")
        except (OSError, RuntimeError) as exc:
            last = exc
        else:
            assert isinstance(data, dict)
            targets = data.get("activeTargets", [])
            active = {t.get("labels", {}).get("instance"): t.get("health") for t in targets
                      if t.get("labels", {}).get("job") == "mcp-host"}  # fmt: skip
            others = {t.get("labels", {}).get("job"): t.get("health") for t in targets
                      if t.get("labels", {}).get("job") != "mcp-host"}  # fmt: skip
            last = {**active, **others}
            if (
                set(active) == want
                and all(h == "up" for h in active.values())
                and all(h == "up" for h in others.values())
            ):
                return
        time.sleep(0.5)
    raise PrometheusStartError(
        f"Prometheus does not scrape the mcp-host pods and the kubelet after 60 s: {last}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="validate_local.py",
        description="Run the reduced matrix (stage minikube, profile local) on the local "
        "real-node cluster with a Prometheus of its own; prints the decision and the report.",
    )
    parser.add_argument("--workdir", type=Path, default=Path(DEFAULT_WORKDIR))
    parser.add_argument("--namespace", default="clerum")
    parser.add_argument("--out", type=Path, default=Path("results/local"))
    parser.add_argument("--matrix", default=None, help="a matrix file (default: the packaged)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="Prometheus' port")
    parser.add_argument(
        "--until-stable", default=None, metavar="S", help="passed on to `run` (with the next)"
    )
    parser.add_argument(
        "--max-repetitions", default=None, metavar="N", help="passed on to `run` --until-stable"
    )
    args = parser.parse_args(argv)
    from spillover_operator.client import ClientError

    kubeconfig = args.workdir.resolve() / "kubeconfig"
    if not kubeconfig.exists():
        print(
            f"validate-local: no local cluster in {args.workdir} (no kubeconfig): "
            "make cluster-up REAL_NODE=1",
            file=sys.stderr,
        )
        return 2

    # Stop cleanly on SIGTERM and on Ctrl-C even when started with SIGINT ignored (a
    # background job): Prometheus must not outlive us.
    def _stop(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    workdir = args.workdir.resolve() / "prometheus-local"
    workdir.mkdir(parents=True, exist_ok=True)
    targets = workdir / "mcp-host-targets.json"
    prometheus: PrometheusServer | None = None
    follower: TargetFollower | None = None
    try:
        follower = TargetFollower(kubeconfig, args.namespace, targets)
        expected = follower.refresh()
        follower.thread.start()
        if expected == 0:
            print(
                f"validate-local: no running mcp-host pod in {args.namespace}: "
                'make platform-local RECIPES="code-review=1 summarize=1"',
                file=sys.stderr,
            )
            return 2
        prometheus = PrometheusServer(
            workdir,
            [],
            scrape_interval_s=SCRAPE_INTERVAL_S,
            port=args.port,
            job="mcp-host",
            discovery=file_targets(targets),
            # The mcp-host pods all run on the real node (the stand-in pins them there).
            extra_scrape_configs=[
                job
                for node in follower.nodes[:1]
                for job in kubelet_scrape_configs(kubeconfig, node, workdir)
            ],
        )
        prometheus.start()
        _wait_scraped(prometheus, follower)
        print(
            f"validate-local: Prometheus {prometheus.url} scrapes {expected} mcp-host pod(s)",
            file=sys.stderr,
        )
        argv_run = [
            sys.executable, "-m", "spillover_harness.cli", "run", "--stage", "minikube",
            "--profile", "local", "--kubeconfig", str(kubeconfig),
            "--context", _current_context(kubeconfig), "--out", str(args.out), "--resume",
        ]  # fmt: skip
        if args.matrix:
            argv_run += ["--matrix", args.matrix]
        if args.until_stable:
            argv_run += ["--until-stable", args.until_stable]
            argv_run += ["--max-repetitions", args.max_repetitions]
        harness = subprocess.Popen(argv_run)
        try:
            return harness.wait()
        except KeyboardInterrupt:
            # The harness stops its runs, restores the policy and says how to resume.
            harness.send_signal(signal.SIGINT)
            harness.wait()
            raise
    except (PrometheusMissing, PrometheusStartError, ClientError) as exc:
        print(f"validate-local: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("validate-local: interrupted; run it again to resume", file=sys.stderr)
        return 130
    finally:
        if follower is not None:
            follower.stop.set()
        if prometheus is not None:
            prometheus.stop()


if __name__ == "__main__":
    sys.exit(main())
