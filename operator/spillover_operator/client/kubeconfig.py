"""What of a kubeconfig this client honours, and impersonation (`as`, `as-groups`,
`as-uid`, `as-user-extra`, and the `--as` flags), as kubectl does.

Every field of the chosen context, cluster and user entry is checked before a request
is sent: a field we do not honour (an auth provider, basic auth, a field we do not know)
is an `UnsupportedKubeconfig` naming it, never ignored, so a request never goes out as
someone other than the kubeconfig says. The fields honoured are those the kubernetes
package's loader honours and the local control plane of the tests proves
(tests/integration/test_kubeconfig_kinds.py); docs/spilloverctl.md lists them.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spillover_operator.client.errors import ConfigError, UnsupportedKubeconfig

USER_FIELDS = frozenset(
    {
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "exec",
        "as",
        "as-groups",
        "as-uid",
        "as-user-extra",
        "extensions",
    }
)
CLUSTER_FIELDS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "proxy-url",
        "extensions",
    }
)
CONTEXT_FIELDS = frozenset({"cluster", "user", "namespace", "extensions"})
EXEC_FIELDS = frozenset(
    {"apiVersion", "command", "args", "env", "provideClusterInfo", "installHint", "interactiveMode"}
)
# Refused with the reason and what to do instead.
_WHY: dict[str, str] = {
    "auth-provider": "auth providers (gcp, azure, oidc) are not supported; use an exec "
    "credential plugin (users[].user.exec), e.g. gke-gcloud-auth-plugin, kubelogin",
    "username": "basic authentication (username/password) is not supported; use a "
    "token, a client certificate or an exec plugin",
    "password": "basic authentication (username/password) is not supported; use a "
    "token, a client certificate or an exec plugin",
}
_PROXY_SCHEMES = ("http", "https")

# Bounds on what becomes request headers.
MAX_NAME = 1024
MAX_GROUPS = 64
MAX_EXTRA_KEYS = 32
MAX_EXTRA_VALUES = 32

IMPERSONATE_USER = "Impersonate-User"
IMPERSONATE_GROUP = "Impersonate-Group"
IMPERSONATE_UID = "Impersonate-Uid"
IMPERSONATE_EXTRA = "Impersonate-Extra-"


@dataclass(frozen=True)
class Impersonation:
    """Who to act as (kubectl's `--as`, `--as-group`, `--as-uid`; the kubeconfig's
    `as`, `as-groups`, `as-uid`, `as-user-extra`). Empty: act as ourselves."""

    user: str = ""
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.user or self.groups or self.uid or self.extra)

    def over(self, base: Impersonation) -> Impersonation:
        """These (the flags) over `base` (the kubeconfig), field by field as kubectl:
        `--as` replaces `as`, `--as-group` replaces `as-groups`, `--as-uid` replaces
        `as-uid`; `as-user-extra` stays."""
        return replace(
            base,
            user=self.user or base.user,
            groups=self.groups or base.groups,
            uid=self.uid or base.uid,
            extra=self.extra or base.extra,
        )

    def headers(self) -> list[tuple[str, str]]:
        """The Impersonate-* request headers (one Impersonate-Group per group)."""
        if not self:
            return []
        out = [(IMPERSONATE_USER, self.user)]
        out += [(IMPERSONATE_GROUP, g) for g in self.groups]
        if self.uid:
            out.append((IMPERSONATE_UID, self.uid))
        for key, values in self.extra:
            out += [(IMPERSONATE_EXTRA + _header_key(key), v) for v in values]
        return out

    def check(self, source: str) -> Impersonation:
        """Self, or ConfigError when groups, a uid or extras come without a user (the API
        server would refuse them; kubectl does too), or a value is unusable."""
        if self and not self.user:
            raise ConfigError(
                f"{source}: impersonating groups, a uid or user extras needs a user to "
                "impersonate; give --as USER (or `as` in the kubeconfig user entry)"
            )
        for value in (self.user, self.uid, *self.groups, *(v for _, vs in self.extra for v in vs)):
            _check_value(value, source)
        return self

    def describe(self) -> str:
        """`as 'alice' (groups: a, b)`, for messages."""
        text = f"as '{self.user}'"
        if self.groups:
            text += f" (groups: {', '.join(self.groups)})"
        return text


# No impersonation: we act as ourselves.
AS_OURSELVES = Impersonation()


def impersonation_from_flags(
    user: str | None, groups: Sequence[str] | None, uid: str | None
) -> Impersonation:
    """What `--as`, `--as-group` (repeatable) and `--as-uid` ask for (each value checked
    by the command line with `flag_value_problem`, the count bounded there)."""
    return Impersonation(user or "", tuple(groups or ()), uid or "")


def flag_value_problem(value: str) -> str | None:
    """Why `value` cannot be an impersonation header value, or None."""
    if not value:
        return "it is empty"
    if not _printable(value):
        return f"it must be one printable line of at most {MAX_NAME} Latin-1 characters"
    return None


def check_entries(
    context: Mapping[str, Any],
    cluster: Mapping[str, Any],
    user: Mapping[str, Any],
    names: Mapping[str, str],
    shown: str,
) -> Impersonation:
    """Refuse what we do not honour in the chosen entries (`names`: the context, cluster
    and user names, for the message); return the user entry's impersonation."""
    where = {k: f"{k} '{v}' in kubeconfig '{shown}'" for k, v in names.items()}
    for field in sorted(user):
        if field in _WHY:
            _refuse(where["user"], field, _WHY[field])
    _unknown(context, CONTEXT_FIELDS, where["context"])
    _unknown(cluster, CLUSTER_FIELDS, where["cluster"])
    _unknown(user, USER_FIELDS, where["user"])
    proxy = cluster.get("proxy-url")
    if proxy is not None:
        scheme = urllib.parse.urlsplit(str(proxy)).scheme
        if not isinstance(proxy, str) or scheme not in _PROXY_SCHEMES:
            _refuse(
                where["cluster"],
                "proxy-url",
                f"only http:// and https:// proxies are supported (got {proxy!r})",
            )
    exec_entry = user.get("exec")
    if exec_entry is not None:
        for field in ("token", "tokenFile"):
            if field in user:
                _refuse(
                    where["user"],
                    field,
                    "a token and an exec plugin together: one of them would be ignored; keep one",
                )
        if not isinstance(exec_entry, Mapping):
            _refuse(where["user"], "exec", "it must be a mapping")
        _unknown(exec_entry, EXEC_FIELDS, where["user"] + " (exec)")
    return _impersonation(user, where["user"])


def _impersonation(user: Mapping[str, Any], where: str) -> Impersonation:
    name = user.get("as")
    groups = user.get("as-groups")
    uid = user.get("as-uid")
    extra = user.get("as-user-extra")
    if name is not None and not isinstance(name, str):
        _refuse(where, "as", "it must be a user name (a string)")
    if uid is not None and not isinstance(uid, str):
        _refuse(where, "as-uid", "it must be a string")
    if groups is not None and not (
        isinstance(groups, list)
        and len(groups) <= MAX_GROUPS
        and all(isinstance(g, str) for g in groups)
    ):
        _refuse(where, "as-groups", f"it must be a list of at most {MAX_GROUPS} group names")
    pairs: list[tuple[str, tuple[str, ...]]] = []
    if extra is not None:
        if not isinstance(extra, Mapping) or len(extra) > MAX_EXTRA_KEYS:
            _refuse(where, "as-user-extra", f"it must map at most {MAX_EXTRA_KEYS} keys to lists")
        for key, values in sorted(extra.items()):
            if not isinstance(key, str) or not key or not _printable(key):
                _refuse(where, "as-user-extra", f"key {key!r} is not a printable string")
            if not (
                isinstance(values, list)
                and len(values) <= MAX_EXTRA_VALUES
                and all(isinstance(v, str) for v in values)
            ):
                _refuse(
                    where,
                    "as-user-extra",
                    f"{key!r} must be a list of at most {MAX_EXTRA_VALUES} strings",
                )
            pairs.append((key, tuple(values)))
    found = Impersonation(name or "", tuple(groups or ()), uid or "", tuple(pairs))
    return found.check(where)


def _unknown(entry: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    for field in sorted(str(k) for k in entry):
        if field not in known:
            _refuse(
                where,
                field,
                f"spilloverctl does not support this field (supported: {', '.join(sorted(known))})",
            )


def _refuse(where: str, field: str, why: str) -> None:
    raise UnsupportedKubeconfig(f"{where}: '{field}' is refused: {why}")


def _printable(text: str) -> bool:
    """One printable line, bounded, that an HTTP header can carry (Latin-1)."""
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return text.isprintable() and len(text) <= MAX_NAME


def _check_value(value: str, source: str) -> None:
    if not _printable(value):
        raise ConfigError(
            f"{source}: impersonation value {value[:40]!r} must be one printable line of at "
            f"most {MAX_NAME} Latin-1 characters (an HTTP header carries it)"
        )


# What a header name may hold as is (RFC 7230 token characters but '%', as client-go).
_TOKEN = frozenset("!#$&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _header_key(key: str) -> str:
    """An extra's key in a header name: percent-encoded beyond token characters, as
    client-go sends it (the API server decodes it)."""
    return "".join(c if c in _TOKEN else "".join(f"%{b:02X}" for b in c.encode()) for c in key)
