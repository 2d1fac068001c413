"""Leader election: of the operators started on one namespace, one acts.

Two operators on one namespace each applied every change: the same Deployment restarted
three times in 0.25 s, 409s, every Event twice, the policy's Ready flipping (issue 19).
Now each operator first takes the Lease `spillover-operator-leader` (coordination.k8s.io/v1)
in every namespace it watches, and only the holder starts kopf's watches; the others
wait, passive (a standby: Ready, no watches, no writes), and read the Lease every
`RETRY_SECONDS`.

- The leader renews the Lease every `RENEW_SECONDS`. It trusts itself for
  `RENEW_DEADLINE_SECONDS` after the start of its last successful renewal: past that (an
  API outage, a stalled process) every write of its handlers waits, then is refused
  (`client.WriteRefused`, retried), until a renewal succeeds again. Should it find the
  Lease held by another, it exits at once (the kubelet restarts it, as a standby).
- A standby takes the Lease when it has seen the same record (holder, renewTime) for
  `DURATION_SECONDS` by its own clock, over reads that all succeeded (no clock sync
  needed: the leader stopped trusting itself `DURATION_SECONDS - RENEW_DEADLINE_SECONDS`
  before; a read that fails starts the count again, so after an API outage the leader,
  cut off like the standby, gets a whole duration to renew and is not replaced), or at
  once when the holder released it (a leader stopped with SIGTERM releases it) or has
  the standby's own identity (its own container, restarted). The wall clock's
  renewTime is never believed: a standby started beside a Lease of a leader long gone
  waits `DURATION_SECONDS` too.
- Every write of the Lease carries the resourceVersion it was read at: of two standbys
  taking it at once, one gets a 409 and stays standby.

Failover: a leader that stops cleanly hands over within `RETRY_SECONDS` (plus kopf's
start); one killed, `DURATION_SECONDS` after its last renewal (0-`RENEW_SECONDS` before
its death) plus up to `RETRY_SECONDS` (docs/operator.md gives the measured figures).

Pure: `decide` judges a Lease read elsewhere, `Term` is the leader's trust in itself,
`kopf_run_options` reads the namespaces and the readiness endpoint from kopf's command
line. `handlers/election.py` does the requests.
"""

from __future__ import annotations

import datetime
import enum
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LEASE_NAME = "spillover-operator-leader"
DURATION_SECONDS = 15
RENEW_SECONDS = 5.0
RENEW_DEADLINE_SECONDS = 10.0
# A standby reads the Lease this often; a leader whose renewal failed tries again this
# often (an API outage ends: trusted again within this).
RETRY_SECONDS = 1.0
# The identity in holderIdentity (default: the host name, in a pod the pod's name).
ID_VAR = "SPILLOVER_LEADER_ID"
# Exit status of a leader that found another holder of its Lease.
EXIT_LOST = 75


class Action(enum.Enum):
    CREATE = "create"  # no Lease: create it, holding it
    TAKE = "take"  # another's Lease, expired or released: write ourselves in
    RENEW = "renew"  # ours: renew it
    WAIT = "wait"  # another's, current: stay standby


@dataclass(frozen=True)
class Seen:
    """A Lease record (holder, renewTime) and when (our monotonic clock) we first saw it."""

    holder: str
    renew_time: str
    at: float


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    seen: Seen | None  # what to remember for the next read


def holder_of(lease: Mapping[str, Any] | None) -> str:
    """The Lease's holderIdentity ("" when none or released)."""
    spec = (lease or {}).get("spec") or {}
    return str(spec.get("holderIdentity") or "")


def duration_of(lease: Mapping[str, Any] | None) -> float:
    spec = (lease or {}).get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    return float(duration) if isinstance(duration, int) and duration > 0 else DURATION_SECONDS


def decide(
    lease: Mapping[str, Any] | None,
    me: str,
    seen: Seen | None,
    now: float,
) -> Decision:
    """What to do with the leader Lease read just now (`lease`, None: there is none):
    `now` our monotonic clock, `seen` what the last read saw (None after a failed read)."""
    if lease is None:
        return Decision(Action.CREATE, "there is no leader Lease", None)
    holder = holder_of(lease)
    if holder == me:
        return Decision(Action.RENEW, "the Lease is ours", None)
    if not holder:
        return Decision(Action.TAKE, "the Lease was released", None)
    spec = lease.get("spec") or {}
    renew_time = str(spec.get("renewTime") or spec.get("acquireTime") or "")
    duration = duration_of(lease)
    if seen is None or (seen.holder, seen.renew_time) != (holder, renew_time):
        seen = Seen(holder, renew_time, now)
        return Decision(Action.WAIT, f"{holder} leads (renewed at {renew_time})", seen)
    unchanged = now - seen.at
    if unchanged >= duration:
        return Decision(
            Action.TAKE, f"{holder} has not renewed the Lease for {unchanged:.0f} s", seen
        )
    return Decision(Action.WAIT, f"{holder} leads (renewed at {renew_time})", seen)


def lease_spec(
    me: str,
    wall: datetime.datetime,
    *,
    lease: Mapping[str, Any] | None = None,
    duration: int = DURATION_SECONDS,
) -> dict[str, Any]:
    """The spec that makes `me` the holder as of `wall`: a renewal of our own Lease
    keeps acquireTime and the transitions, taking another's counts one more."""
    stamp = micro_time(wall)
    spec: dict[str, Any] = {
        "holderIdentity": me,
        "leaseDurationSeconds": duration,
        "renewTime": stamp,
    }
    old = (lease or {}).get("spec") or {}
    if lease is None:
        spec.update(acquireTime=stamp, leaseTransitions=0)
    elif holder_of(lease) != me:
        transitions = old.get("leaseTransitions")
        spec.update(
            acquireTime=stamp,
            leaseTransitions=(transitions if isinstance(transitions, int) else 0) + 1,
        )
    return spec


def released_spec(wall: datetime.datetime) -> dict[str, Any]:
    """The spec of a Lease let go: no holder (a standby takes it at its next read)."""
    return {"holderIdentity": None, "renewTime": micro_time(wall), "leaseDurationSeconds": 1}


def micro_time(when: datetime.datetime) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds, UTC)."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Term:
    """The leader's trust in itself: `renewed_at` is our monotonic clock at the start of
    the last renewal the API server accepted (None: not leading)."""

    renewed_at: float | None = None
    deadline: float = RENEW_DEADLINE_SECONDS

    def confirmed(self, now: float) -> bool:
        return self.renewed_at is not None and now - self.renewed_at < self.deadline

    def renewed(self, started: float) -> None:
        self.renewed_at = started if self.renewed_at is None else max(self.renewed_at, started)

    def end(self) -> None:
        self.renewed_at = None


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    path: str


@dataclass(frozen=True)
class KopfRunOptions:
    """What `kopf run` was told: the namespaces to watch and the health endpoint."""

    namespaces: tuple[str, ...]
    liveness: Endpoint | None


def _endpoint(url: str) -> Endpoint | None:
    parsed = urllib.parse.urlsplit(url)
    if not parsed.hostname or parsed.port is None:
        return None
    return Endpoint(parsed.hostname, parsed.port, parsed.path or "/")


def kopf_run_options(argv: Sequence[str]) -> KopfRunOptions:
    """The exact namespaces (`--namespace X`, `--namespace=X`, `-n X`; patterns with
    glob characters or negations are skipped) and `--liveness URL` of a `kopf run`
    command line."""
    namespaces: list[str] = []
    liveness: Endpoint | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        value: str | None = None
        key = arg
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
        elif arg in ("--namespace", "-n", "--liveness") and i + 1 < len(args):
            value = args[i + 1]
            i += 1
        i += 1
        if value is None:
            continue
        if key in ("--namespace", "-n"):
            for name in value.split(","):
                name = name.strip()
                if name and not any(c in name for c in "*?[]!"):
                    namespaces.append(name)
        elif key == "--liveness":
            liveness = _endpoint(value)
    return KopfRunOptions(tuple(sorted(set(namespaces))), liveness)


def leader_summary(lease: Mapping[str, Any] | None, now: datetime.datetime) -> str:
    """Who leads, from the leader Lease read at wall time `now` (for `spilloverctl
    status`: with `replicas: 2`, which replica acts, and whether one does)."""
    if lease is None:
        return f"none yet (no Lease {LEASE_NAME!r}: no operator has led in this namespace)"
    holder = holder_of(lease)
    spec = lease.get("spec") or {}
    stamp = spec.get("renewTime") or spec.get("acquireTime")
    try:
        renewed = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        renewed = None
    if not holder:
        return f"none: the Lease {LEASE_NAME!r} was released (a standby takes it within seconds)"
    if renewed is None:
        return f"{holder} (its Lease {LEASE_NAME!r} has no renewTime)"
    age = max(0.0, (now - renewed).total_seconds())
    duration = duration_of(lease)
    if age <= duration:
        return f"{holder} (leader Lease renewed {age:.0f} s ago)"
    return (
        f"none for {age - duration:.0f} s: {holder} last renewed the leader Lease {age:.0f} s "
        f"ago and a standby would have taken it after {duration:.0f} s (is any replica running?)"
    )
