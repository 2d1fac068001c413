"""Whether an operator watches a namespace: its heartbeat Lease.

The operator renews the Lease `spillover-operator` every `RENEW_SECONDS` in each
namespace it has seen objects in (the namespaces it watches: its initial listing of
Deployments sees them at start). `spilloverctl status` reads it: no Lease means no
operator watches the namespace (or none ever started there); a Lease not renewed for
longer than its `leaseDurationSeconds` means the operator that watched it is not
running now. Pure: `presence` judges a Lease read elsewhere.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LEASE_NAME = "spillover-operator"
RENEW_SECONDS = 10.0
DURATION_SECONDS = 30


@dataclass(frozen=True)
class Presence:
    """`watched`: True (a live heartbeat), False (none, or stale), None (unknown)."""

    watched: bool | None
    message: str


def _parse(stamp: Any) -> datetime.datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def presence(namespace: str, lease: Mapping[str, Any] | None, now: datetime.datetime) -> Presence:
    """What the heartbeat Lease (None: there is none) says about namespace `namespace`."""
    if lease is None:
        return Presence(
            False,
            f"no operator watches namespace {namespace!r} (no Lease {LEASE_NAME!r} there; "
            "a running operator renews it every "
            f"{RENEW_SECONDS:g} s): nothing applies this policy. Run the operator with "
            f"--namespace={namespace} (WATCH_NAMESPACE in its Deployment)",
        )
    spec = lease.get("spec") or {}
    renewed = _parse(spec.get("renewTime"))
    holder = spec.get("holderIdentity") or "unknown"
    duration = spec.get("leaseDurationSeconds") or DURATION_SECONDS
    if renewed is None:
        return Presence(None, f"the operator's Lease {LEASE_NAME!r} has no renewTime")
    age = (now - renewed).total_seconds()
    if age > float(duration):
        return Presence(
            False,
            f"the operator watching namespace {namespace!r} ({holder}) last renewed its "
            f"Lease {age:.0f} s ago (at {spec.get('renewTime')}): it is not running",
        )
    return Presence(True, f"watched by the operator {holder} (heartbeat {age:.0f} s ago)")
