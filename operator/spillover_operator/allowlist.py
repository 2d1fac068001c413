"""Which Deployments a SpilloverPolicy may target: the operator's allow-list.

Why: the operator may patch Deployments that a policy's author may not (a confused
deputy: patching a pod template reaches every Secret and ServiceAccount of the
namespace). So it configures only the Deployments the platform team named in
`SPILLOVER_ALLOWED_TARGETS` (comma-separated Deployment names), and refuses any other
target before reading or patching anything.

Unset or blank, the setting means the WRC's conventional name (`DEFAULT_TARGET`); a
malformed setting refuses every target, saying what to fix. There is no wildcard.

Pure: parse the setting, decide; reconcile.py reports the refusal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from spillover_operator.constants import DEFAULT_TARGET, DNS1123_SUBDOMAIN

ALLOWED_TARGETS_VAR = "SPILLOVER_ALLOWED_TARGETS"
FIELD = "spec.target.deployment"

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
    names: list[str] = []
    problems: list[str] = []
    for part in raw.split(","):
        name = part.strip()
        if not name or name in names:
            continue
        if "*" in name:
            problems.append(f"{name!r}: there is no wildcard, name each Deployment")
        elif len(name) > 253 or not _NAME_RE.match(name):
            problems.append(
                f"{name!r} is not a Deployment name (lowercase letters, digits, '-' and "
                "'.', starting and ending with a letter or digit)"
            )
        else:
            names.append(name)
    if problems:
        raise AllowListError(
            f"{ALLOWED_TARGETS_VAR}={raw!r} is invalid: {'; '.join(problems)}. Set it to "
            f"the comma-separated names of the Deployments the operator may configure "
            f"(for example {DEFAULT_TARGET})"
        )
    return AllowList(tuple(names))


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
    if allowed.allows(deployment):
        return None
    return (
        f"{FIELD}: Deployment {deployment!r} is not one the operator may configure; "
        f"allowed: {allowed.describe()}. Set {FIELD} to an allowed name, or ask the "
        "platform team to add this one to the allow-list. Nothing was read or changed "
        "on any Deployment."
    )
