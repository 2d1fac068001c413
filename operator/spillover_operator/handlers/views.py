"""What the operator already watches, as a `reconcile.Reader`: kopf indexes of the
policies and Deployments of the watched namespace (kept current by kopf's watches), so
reconciling reads nothing from the API. The object of the event being handled is the
freshest copy and is preferred over its index entry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from spillover_operator.client import Connection, find_deployment, find_policy
from spillover_operator.domain.policy import PolicyCopy, target_of

# The kopf index names (main.py registers them under these names).
POLICIES = "policy_bodies"
DEPLOYMENTS = "deployment_bodies"
BY_TARGET = "policies_by_target"

Key = tuple[str | None, str]
Copy = TypeVar("Copy", bound=Mapping[str, Any])


def snapshot(obj: Any) -> Any:
    """A plain-dict copy of a kopf body (kopf hands out read-only views), without
    managedFields (large, never read)."""
    if isinstance(obj, Mapping):
        return {str(k): snapshot(v) for k, v in obj.items() if k != "managedFields"}
    if isinstance(obj, list | tuple):
        return [snapshot(v) for v in obj]
    return obj


def policy_entry(namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[Key, Any]:
    """The policy as the watch delivered it, its spec parsed here: the one parse of
    this copy (every reader hands out this `PolicyCopy`)."""
    return {(namespace, name): PolicyCopy(snapshot(body))}


def event_policy(
    indexes: Mapping[str, Mapping[Key, Iterable[Any]]],
    namespace: str | None,
    body: Mapping[str, Any],
) -> PolicyCopy:
    """The policy of the event being handled, as a `PolicyCopy`: kopf indexed the same
    event's object first, so its parse is kept (a copy whose spec may differ, such
    as an older event's, is parsed)."""
    if isinstance(body, PolicyCopy):
        return body
    name = str((body.get("metadata") or {}).get("name"))
    return PolicyCopy(snapshot(body), _indexed_policy(indexes, (namespace, name)))


def deployment_entry(namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[Key, Any]:
    return {(namespace, name): snapshot(body)}


def target_entry(namespace: str | None, name: str, spec: Mapping[str, Any]) -> dict[Key, Any]:
    """(namespace, target Deployment) -> the names of the policies targeting it (an
    invalid policy too: it is reconciled on Deployment events to report InvalidSpec)."""
    target = target_of(spec)
    if target is None:
        return {}
    return {(namespace, target.deployment): name}


def _version(obj: Mapping[str, Any] | None) -> int | None:
    raw = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except ValueError:
        return None


def newer(copy: Copy, mine: Copy | None) -> Copy:
    """`mine` (what a status write answered) when it is a later version of the same
    object than `copy`, else `copy`. resourceVersions are compared as the numbers the
    API server hands out (etcd revisions); one that is not a number is never taken
    as newer."""
    if mine is None:
        return copy
    same = (copy.get("metadata") or {}).get("uid") == (mine.get("metadata") or {}).get("uid")
    ours, theirs = _version(mine), _version(copy)
    if same and ours is not None and theirs is not None and ours > theirs:
        return mine
    return copy


def _one(index: Mapping[Key, Iterable[Any]], key: Key) -> dict[str, Any] | None:
    for value in index.get(key, ()):
        return dict(value)
    return None


def _indexed_policy(
    indexes: Mapping[str, Mapping[Key, Iterable[Any]]], key: Key
) -> PolicyCopy | None:
    """The index's copy of a policy itself (`policy_entry` made it, parsed)."""
    for value in indexes[POLICIES].get(key, ()):
        if not isinstance(value, PolicyCopy):
            raise TypeError(f"the policy index holds {type(value).__name__}, not a PolicyCopy")
        return value
    return None


@dataclass(frozen=True)
class IndexReader:
    """A `reconcile.Reader` over kopf's indexes for one namespace.

    `fresh` holds newer copies than the index, (kind, name) -> body (None: it does not
    exist; a policy is a `PolicyCopy`): the event's own object, and what `confirmed`
    read from the API. Neither an
    index entry nor an event's object is necessarily current: kopf processes an
    object's events one after the other, so it may still be handling an old one while
    the API is several versions ahead. `confirmed` therefore reads with a GET (through
    `cluster`) whatever reconciling asks to confirm and was not read from the API yet
    (`read`). `trusted`: the indexes were just listed (operator start): nothing to
    confirm.
    """

    namespace: str
    indexes: Mapping[str, Mapping[Key, Iterable[Any]]]
    fresh: dict[tuple[str, str], Any] = field(default_factory=dict)
    cluster: Connection | None = None
    trusted: bool = False
    read: frozenset[tuple[str, str]] = frozenset()
    # The policies as the operator's own status writes answered them (shared by every
    # reader of the process): kopf's copy of a policy lags behind them until the event
    # of that write is handled, and a status write from the older copy would conflict.
    written: dict[Key, PolicyCopy] | None = None
    # The Deployments as the operator's own patches answered them (shared likewise):
    # planned on kopf's older copy, a change the operator has just made looks not made
    # yet, and made again it would be reported again (a second Applied Event).
    written_deployments: dict[Key, dict[str, Any]] | None = None

    def policy(self, name: str) -> PolicyCopy | None:
        copy: PolicyCopy | None
        if ("policy", name) in self.fresh:
            copy = self.fresh[("policy", name)]
        else:
            copy = _indexed_policy(self.indexes, (self.namespace, name))
        mine = None if self.written is None else self.written.get((self.namespace, name))
        return newer(copy, mine) if copy is not None else None

    def remember(self, policy: dict[str, Any]) -> None:
        """`policy` is a status write's answer: its spec is the one of the copy the write
        was made from (same generation), whose parse it keeps."""
        if self.written is not None:
            meta = policy.get("metadata") or {}
            name = str(meta.get("name"))
            known = self.policy(name)
            self.written[(self.namespace, name)] = PolicyCopy(snapshot(policy), known)

    def deployment(self, name: str) -> dict[str, Any] | None:
        if ("deployment", name) in self.fresh:
            copy = self.fresh[("deployment", name)]
        else:
            copy = _one(self.indexes[DEPLOYMENTS], (self.namespace, name))
        mine = (
            None
            if self.written_deployments is None
            else self.written_deployments.get((self.namespace, name))
        )
        return newer(copy, mine) if copy is not None else None

    def remember_deployment(self, deployment: dict[str, Any]) -> None:
        if self.written_deployments is not None:
            meta = deployment.get("metadata") or {}
            key = (self.namespace, str(meta.get("name")))
            self.written_deployments[key] = snapshot(deployment)

    def current(self, *, policy: str | None, deployment: str | None) -> bool:
        if self.cluster is None or self.trusted:
            return True
        wanted = {("policy", policy), ("deployment", deployment)}
        return all(key in self.read for key in wanted if key[1] is not None)

    def confirmed(
        self, *, policy: str | None, deployment: str | None, again: bool = False
    ) -> IndexReader | None:
        if self.cluster is None or (
            not again and self.current(policy=policy, deployment=deployment)
        ):
            return None
        conn = self.cluster.in_namespace(self.namespace)
        fresh = dict(self.fresh)
        read = set(self.read)
        if policy is not None and (again or ("policy", policy) not in read):
            found = find_policy(conn, policy)
            fresh[("policy", policy)] = (
                None if found is None else PolicyCopy(found, self.policy(policy))
            )
            read.add(("policy", policy))
        if deployment is not None and (again or ("deployment", deployment) not in read):
            fresh[("deployment", deployment)] = find_deployment(conn, deployment)
            read.add(("deployment", deployment))
        return replace(self, fresh=fresh, read=frozenset(read))

    def without_copies(self) -> IndexReader:
        """This reader without the event's copies and what it confirmed: it reads what
        kopf's indexes hold when it is asked (the operator's own writes included)."""
        return replace(self, fresh={}, read=frozenset())

    def policies(self) -> list[PolicyCopy]:
        """Every policy of the namespace (as the index holds it, or fresher)."""
        names = sorted(str(k[1]) for k in self.indexes[POLICIES] if k[0] == self.namespace)
        found = (self.policy(name) for name in names)
        return [policy for policy in found if policy is not None]

    def names_targeting(self, deployment: str) -> list[str]:
        return sorted(
            {str(n) for n in self.indexes[BY_TARGET].get((self.namespace, deployment), ())}
        )

    def policies_targeting(self, deployment: str) -> list[PolicyCopy]:
        found = (self.policy(name) for name in self.names_targeting(deployment))
        return [policy for policy in found if policy is not None]


def indexes_of(kwargs: Mapping[str, Any]) -> dict[str, Mapping[Key, Iterable[Any]]]:
    """The three indexes from a kopf handler's keyword arguments."""
    return {name: kwargs[name] for name in (POLICIES, DEPLOYMENTS, BY_TARGET)}
