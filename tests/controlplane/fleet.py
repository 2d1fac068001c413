"""Several local control planes as one fleet: the kubeconfig that names each by its own
context, as a platform team's kubeconfig names its production clusters (spilloverctl's
`--context` given more than once, `--all-contexts`)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def closed_port() -> int:
    """A loopback port nothing listens on (a cluster that is down: refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def merged_kubeconfig(
    path: Path, kubeconfigs: Mapping[str, Path], *, unreachable: str | None = None
) -> Path:
    """One kubeconfig with a context per entry of `kubeconfigs` (name -> a LocalCluster's
    kubeconfig), its cluster and user renamed after it; with `unreachable`, one more
    context of that name whose API server is a closed loopback port (credentials of the
    first cluster)."""
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [],
                           "contexts": []}  # fmt: skip
    first: dict[str, Any] | None = None
    for name, source in kubeconfigs.items():
        one = json.loads(source.read_text())
        cluster = dict(one["clusters"][0]["cluster"])
        user = dict(one["users"][0]["user"])
        context = dict(one["contexts"][0]["context"], cluster=name, user=name)
        doc["clusters"].append({"name": name, "cluster": cluster})
        doc["users"].append({"name": name, "user": user})
        doc["contexts"].append({"name": name, "context": context})
        first = first or {"cluster": cluster, "user": user}
    if unreachable is not None and first is not None:
        dead = dict(first["cluster"], server=f"https://127.0.0.1:{closed_port()}")
        doc["clusters"].append({"name": unreachable, "cluster": dead})
        doc["users"].append({"name": unreachable, "user": first["user"]})
        doc["contexts"].append(
            {"name": unreachable, "context": {"cluster": unreachable, "user": unreachable}}
        )
    doc["current-context"] = doc["contexts"][0]["name"]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=2)
    return path
