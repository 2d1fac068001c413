"""What a real node may leave on this host, read so that a test can compare before and after.

A real kubelet and containerd change the host beyond their own processes: iptables
chains, mounts, cgroups, sysctls, network links and a few well-known directories.
``snapshot()`` reads all of it; ``difference(before, after)`` says, line by line, what
is in one and not the other (empty: the host is as it was).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")

# What the kubelet sets at start (unless protectKernelDefaults), and what a CNI bridge
# with a gateway turns on.
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
)

# Paths a kubelet, containerd or the CNI plugins create by default.
WELL_KNOWN_PATHS = (
    "/run/containerd",
    "/var/lib/cni",
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/opt/containerd",
    "/etc/cni/net.d",
    "/run/netns",
)

# What a real node makes outside them (realnode.RealNode.data).
OWN_GLOBS = ("/var/tmp/spillover-node-*",)

PROCESS_NAMES = ("kubelet", "containerd", "containerd-shim-runc-v2", "pause")


def read_sysctl(name: str) -> str | None:
    path = Path("/proc/sys") / name.replace(".", "/")
    try:
        return path.read_text().strip()
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    path = Path("/proc/sys") / name.replace(".", "/")
    path.write_text(value + "\n")


def _iptables_lines(command: str) -> list[str]:
    if shutil.which(command) is None:
        return []
    proc = subprocess.run([command], capture_output=True, text=True, check=False)
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith("#"):
            continue
        # Chain declarations carry packet counters: keep the name and policy only.
        line = re.sub(r"\[\d+:\d+\]$", "", line).rstrip()
        out.append(line)
    return out


def iptables_chains(command: str = "iptables-save") -> set[str]:
    """`table/CHAIN` for every chain `command` lists."""
    table = ""
    chains = set()
    for line in _iptables_lines(command):
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            chains.add(f"{table}/{line[1:].split()[0]}")
    return chains


def nft_tables() -> list[str]:
    """`family name` of every nftables table (iptables-nft keeps its tables there)."""
    if shutil.which("nft") is None:
        return []
    proc = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False)
    return sorted(line.removeprefix("table ").strip() for line in proc.stdout.splitlines() if line)


def empty_iptables_tables(command: str = "iptables-save") -> set[str]:
    """Tables `command` lists that hold nothing: no rules, no chains of their own, every
    built-in chain accepting (what iptables-nft leaves once the chains are removed)."""
    out: set[str] = set()
    table, empty = "", True
    builtin = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}
    for line in _iptables_lines(command):
        if line.startswith("*"):
            table, empty = line[1:], True
        elif line.startswith(":"):
            name, policy = line[1:].split()[:2]
            empty = empty and name in builtin and policy == "ACCEPT"
        elif line == "COMMIT":
            if empty:
                out.add(table)
        elif line.strip():
            empty = False
    return out


def mountpoints() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        out.append(fields[4].encode().decode("unicode_escape"))
    return out


def cgroup_children() -> list[str]:
    """The top-level cgroups of every v1 hierarchy and of the v2 tree."""
    out = []
    if not CGROUP_ROOT.is_dir():
        return out
    for hierarchy in sorted(CGROUP_ROOT.iterdir()):
        if not hierarchy.is_dir():
            continue
        try:
            children = sorted(p.name for p in hierarchy.iterdir() if p.is_dir())
        except OSError:
            continue
        out += [f"{hierarchy.name}/{c}" for c in children]
    return out


def links() -> list[str]:
    proc = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False)
    return sorted(line.split(":")[1].strip().split("@")[0] for line in proc.stdout.splitlines())


def processes() -> list[str]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm in PROCESS_NAMES or comm.startswith("containerd-shim"):
            out.append(comm)
    return sorted(out)


@dataclass
class HostState:
    iptables: list[str] = field(default_factory=list)
    ip6tables: list[str] = field(default_factory=list)
    nft: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    sysctls: dict[str, str | None] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)
    paths: dict[str, bool] = field(default_factory=dict)
    processes: list[str] = field(default_factory=list)


def snapshot() -> HostState:
    return HostState(
        iptables=_iptables_lines("iptables-save"),
        ip6tables=_iptables_lines("ip6tables-save"),
        nft=nft_tables(),
        mounts=sorted(mountpoints()),
        cgroups=cgroup_children(),
        sysctls={name: read_sysctl(name) for name in SYSCTLS},
        links=links(),
        paths={
            **{p: os.path.lexists(p) for p in WELL_KNOWN_PATHS},
            **{str(p): True for g in OWN_GLOBS for p in Path("/").glob(g.lstrip("/"))},
        },
        processes=processes(),
    )


def difference(before: HostState, after: HostState) -> list[str]:
    """Each way `after` differs from `before`, one line each ('+' added, '-' gone)."""
    out: list[str] = []
    for name in ("iptables", "ip6tables", "nft", "mounts", "cgroups", "links", "processes"):
        old, new = getattr(before, name), getattr(after, name)
        out += [f"{name}: + {x}" for x in sorted(set(new) - set(old))]
        out += [f"{name}: - {x}" for x in sorted(set(old) - set(new))]
    for key in sorted(set(before.sysctls) | set(after.sysctls)):
        if before.sysctls.get(key) != after.sysctls.get(key):
            out.append(f"sysctl {key}: {before.sysctls.get(key)} -> {after.sysctls.get(key)}")
    for path in sorted(set(before.paths) | set(after.paths)):
        if before.paths.get(path) != after.paths.get(path):
            out.append(f"path {path}: exists {before.paths.get(path)} -> {after.paths.get(path)}")
    return out
