"""Which Deployments a SpilloverPolicy may target: the operator's allow-list.

Why: the operator may patch Deployments that a policy's author may not (a confused
deputy: patching a pod template reaches every Secret and ServiceAccount of the
namespace). So it configures only the Deployments the platform team named in
`SPILLOVER_ALLOWED_TARGETS` (comma-separated Deployment names), and refuses any other
target before reading or patching anything.

Unset or blank, the setting means the WRC's conventional name (`DEFAULT_TARGET`). There
is no wildcard. The operator reads its settings once, at start-up (`settings.py`): a
malformed one stops it there, naming what to fix. (`refusal`, which reads a mapping
each time, refuses every target for a malformed setting: the safe side.)

The recipe workloads the operator may restart when it refreshes stale recipe pods
are a second, separate allow-list: `SPILLOVER_REFRESH_DEPLOYMENTS` and
`SPILLOVER_REFRESH_STATEFULSETS` (comma-separated names; set by
manifests/components/recipe-pods-refresh). Unset or blank, it is empty: the operator
restarts nothing, whatever a policy's selector matches, and deletes no pod ever.

Pure: parse the setting, decide; reconcile.py and recipe_reconcile.py report the
refusal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from spillover_operator.domain.constants import DEFAULT_TARGET, DNS1123_SUBDOMAIN
from spillover_operator.domain.recipe_pods import Owner

ALLOWED_TARGETS_VAR = "SPILLOVER_ALLOWED_TARGETS"
FIELD = "spec.target.deployment"
REFRESH_DEPLOYMENTS_VAR = "SPILLOVER_REFRESH_DEPLOYMENTS"
REFRESH_STATEFULSETS_VAR = "SPILLOVER_REFRESH_STATEFULSETS"
REFRESH_VARS: dict[str, str] = {
    "Deployment": REFRESH_DEPLOYMENTS_VAR,
    "StatefulSet": REFRESH_STATEFULSETS_VAR,
}

_NAME_RE = re.compile(DNS1123_SUBDOMAIN)


class AllowListError(ValueError):
    """`SPILLOVER_ALLOWED_TARGETS` is not a comma-separated list of Deployment names."""


@dataclass(frozen=True)
class AllowList:
    """The Deployment names the operator may configure; `defaulted`: the setting was
    unset or blank, so the names are the default."""

    names: tuple[str, ...]
    defaulted: bool = False

    def allows(self, deployment: str) -> bool:
        return deployment in self.names

    def describe(self) -> str:
        """The names and where they come from, for messages."""
        where = (
            f"the default, as {ALLOWED_TARGETS_VAR} is not set"
            if self.defaulted
            else f"the operator's {ALLOWED_TARGETS_VAR}"
        )
        return f"{', '.join(self.names)} ({where})"


DEFAULT = AllowList((DEFAULT_TARGET,), defaulted=True)


def parse(raw: str | None) -> AllowList:
    """The allow-list a `SPILLOVER_ALLOWED_TARGETS` value means.

    Names are comma-separated; spaces around them and empty entries are ignored,
    duplicates collapse. None or a blank value: `DEFAULT`. Raises AllowListError naming
    every bad entry.
    """
    if raw is None or not raw.replace(",", "").strip():
        return DEFAULT
    return AllowList(
        _names(
            raw,
            ALLOWED_TARGETS_VAR,
            "Deployment",
            f"the comma-separated names of the Deployments the operator may configure "
            f"(for example {DEFAULT_TARGET})",
        )
    )


def _names(raw: str, var: str, kind: str, fix: str) -> tuple[str, ...]:
    """The names of a comma-separated setting `var` (blank entries and duplicates
    dropped); AllowListError naming every bad entry and `fix`."""
    names: list[str] = []
    problems: list[str] = []
    for part in raw.split(","):
        name = part.strip()
        if not name or name in names:
            continue
        if "*" in name:
            problems.append(f"{name!r}: there is no wildcard, name each {kind}")
        elif len(name) > 253 or not _NAME_RE.match(name):
            problems.append(
                f"{name!r} is not a {kind} name (lowercase letters, digits, '-' and "
                "'.', starting and ending with a letter or digit)"
            )
        else:
            names.append(name)
    if problems:
        raise AllowListError(f"{var}={raw!r} is invalid: {'; '.join(problems)}. Set it to {fix}")
    return tuple(names)


def from_environ(environ: Mapping[str, str]) -> AllowList:
    """The allow-list configured in `environ` (raises AllowListError if malformed)."""
    return parse(environ.get(ALLOWED_TARGETS_VAR))


def refusal(deployment: str, environ: Mapping[str, str]) -> str | None:
    """None if the operator may configure Deployment `deployment`, else why not: the
    message for the policy's status and Event (names the field and the allowed names).

    A malformed setting refuses every target (the safe side), naming the fix.
    """
    try:
        allowed = from_environ(environ)
    except AllowListError as exc:
        return (
            f"{FIELD}: {deployment!r} cannot be checked against the operator's allow-list: "
            f"{exc}. The operator configures no Deployment until its setting is fixed; "
            "nothing was changed."
        )
    return target_refusal(deployment, allowed)


def target_refusal(deployment: str, allowed: AllowList) -> str | None:
    """None if `allowed` lets the operator configure Deployment `deployment`, else why
    not (names the field, the allowed names and the fix)."""
    if allowed.allows(deployment):
        return None
    return (
        f"{FIELD}: Deployment {deployment!r} is not one the operator may configure; "
        f"allowed: {allowed.describe()}. Set {FIELD} to an allowed name, or ask the "
        "platform team to add this one to the allow-list. Nothing was read or changed "
        "on any Deployment."
    )


# ---- the recipe workloads a refresh may restart ----------------------------------


@dataclass(frozen=True)
class RefreshAllowList:
    """The recipe workloads (Deployments, StatefulSets) the operator may rollout-restart.
    Nothing else is ever restarted or deleted by a refresh."""

    owners: frozenset[Owner]

    def allows(self, owner: Owner) -> bool:
        return owner in self.owners

    def describe(self) -> str:
        if not self.owners:
            return (
                f"none ({REFRESH_DEPLOYMENTS_VAR} and {REFRESH_STATEFULSETS_VAR} name no workload)"
            )
        return f"{', '.join(str(o) for o in sorted(self.owners))} (the operator's " + (
            f"{REFRESH_DEPLOYMENTS_VAR}/{REFRESH_STATEFULSETS_VAR})"
        )


NO_REFRESH = RefreshAllowList(frozenset())


def refresh_allow_list(environ: Mapping[str, str]) -> RefreshAllowList:
    """The recipe workloads `environ` lets the operator restart (empty when unset);
    AllowListError when a setting is malformed."""
    owners: set[Owner] = set()
    for kind, var in REFRESH_VARS.items():
        raw = environ.get(var) or ""
        fix = (
            f"the comma-separated names of the recipe {kind}s the operator may restart "
            "(or leave it empty: none)"
        )
        owners.update(Owner(kind, name) for name in _names(raw, var, kind, fix))
    return RefreshAllowList(frozenset(owners))


def refresh_refusal(owner: Owner, environ: Mapping[str, str]) -> str | None:
    """None if a refresh may restart `owner`, else why not (for the policy's condition
    and its Warning Event): the owner, the allowed workloads and how to change them. A
    malformed setting refuses every owner."""
    try:
        allowed = refresh_allow_list(environ)
    except AllowListError as exc:
        return (
            f"{owner} cannot be checked against the operator's refresh allow-list: {exc}; "
            "the operator restarts nothing until its setting is fixed"
        )
    return owner_refusal(owner, allowed)


def owner_refusal(owner: Owner, allowed: RefreshAllowList) -> str | None:
    """None if `allowed` lets a refresh restart `owner`, else why not."""
    if allowed.allows(owner):
        return None
    if owner.kind not in REFRESH_VARS:
        what = (
            "its pods have no controller that recreates them"
            if not owner.recreates
            else f"the operator never deletes pods, and restarts only Deployments and "
            f"StatefulSets (this is a {owner.kind})"
        )
        return f"{owner} is not refreshed: {what}; restart its pods by hand"
    return (
        f"{owner} is not a recipe workload the operator may restart; allowed: "
        f"{allowed.describe()}. Narrow spec.recipePods.selector to the recipe mcp-host pods, "
        "or ask the platform team to add the workload to recipeDeployments/"
        "recipeStatefulSets of ConfigMap spillover-system/spillover-allowed-targets"
    )
