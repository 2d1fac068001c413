"""Connecting to the cluster: a kubeconfig (and context) or the in-cluster service
account, and the namespace to work in. A `Connection` also knows how to name itself in
error messages (the kubeconfig, the context, the API server)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from spillover_operator.client.errors import ConfigError
from spillover_operator.client.kubeconfig import AS_OURSELVES, Impersonation, check_entries
from spillover_operator.client.transport import (
    ApiClientTransport,
    HttpTransport,
    NotPlain,
    Transport,
    plain_transport,
    read_plain,
    with_headers,
)

DEFAULT_NAMESPACE = "clerum"
_PROXY_VARIABLES = (
    "https_proxy",
    "HTTPS_PROXY",
    "http_proxy",
    "HTTP_PROXY",
    "all_proxy",
    "ALL_PROXY",
)
KUBECONFIG_DEFAULT = "~/.kube/config"
IN_CLUSTER = "(in-cluster service account)"
_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# (connect, read) seconds for every request: a dead API server must not hang the kill
# switch, nor hold the operator's reconcile lock.
REQUEST_TIMEOUT = (10.0, 30.0)


@dataclass(frozen=True)
class Connection:
    """How to reach the API server plus what to name in messages and who we are.

    `transport` sends the requests (`client.transport`: plain HTTP, or a kubernetes
    ApiClient; an ApiClient given here is wrapped). `api_client` is a kubernetes
    ApiClient on the same credentials, built on first use (importing the kubernetes
    package is slow; the commands that need it pay for it).

    `field_manager` is recorded in managedFields of what we patch and as the source of
    the Events we post (spilloverctl, spillover-operator, spillover-harness).

    `impersonation` is who the requests act as (Impersonate-* headers, sent by the
    transport; `client.kubeconfig`), empty when we act as ourselves.

    `write_gate`, when set, is called before every write (any request but GET) and may
    raise instead (`WriteRefused`): the operator's leader election closes it while this
    process is not the confirmed leader (`spillover_operator.domain.leadership`).
    """

    transport: Transport
    namespace: str
    field_manager: str
    kubeconfig: str = ""
    context: str = ""
    server: str = ""
    request_timeout: tuple[float, float] = REQUEST_TIMEOUT
    impersonation: Impersonation = AS_OURSELVES
    write_gate: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.transport, HttpTransport | ApiClientTransport):
            object.__setattr__(self, "transport", ApiClientTransport(self.transport))

    @classmethod
    def from_api_client(cls, api_client: Any, namespace: str, *, field_manager: str) -> Connection:
        """Wrap an ApiClient configured elsewhere (tests, benchmarks)."""
        host = str(getattr(api_client.configuration, "host", "") or "")
        return cls(ApiClientTransport(api_client), namespace, field_manager, server=host)

    @property
    def api_client(self) -> Any:
        """A kubernetes ApiClient (built on first use when requests go over HTTP)."""
        return self.transport.api_client()

    def in_namespace(self, namespace: str) -> Connection:
        """The same connection working in another namespace (shares the ApiClient)."""
        if namespace == self.namespace:
            return self
        return dataclasses.replace(self, namespace=namespace)

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    @property
    def apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self.api_client)

    @property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client)

    @property
    def where(self) -> str:
        """`context 'x' in kubeconfig 'y' (API server z)`, for messages (`, as 'u'`
        when impersonating)."""
        acting = f", {self.impersonation.describe()}" if self.impersonation else ""
        if self.kubeconfig == IN_CLUSTER:
            return f"the in-cluster service account (API server {self.server}{acting})"
        if not self.kubeconfig:
            return f"API server {self.server}{acting}"
        return (
            f"context '{self.context}' in kubeconfig '{self.kubeconfig}' "
            f"(API server {self.server}{acting})"
        )


def connect(
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    *,
    field_manager: str,
    prefer_in_cluster: bool = False,
    impersonate: Impersonation = AS_OURSELVES,
) -> Connection:
    """Load the kubeconfig (or the in-cluster service account) and pick the namespace:
    `namespace`, else the context's namespace, else `clerum`.

    The in-cluster account is used when no kubeconfig is given or found and the process
    runs in a pod; `prefer_in_cluster` (the operator) uses it whenever the process runs
    in a pod. `impersonate` (the `--as` flags) overrides the kubeconfig's impersonation
    field by field, as kubectl. Raises ConfigError naming the kubeconfig and the context
    (UnsupportedKubeconfig for a field this client does not honour).
    """
    impersonate.check("--as/--as-group/--as-uid")
    if prefer_in_cluster and not (kubeconfig or context) and _in_pod():
        try:
            return _in_cluster(namespace, field_manager, impersonate)
        except ConfigError:
            pass  # a pod without a service account token: try the kubeconfig
    if _use_in_cluster(kubeconfig, context):
        return _in_cluster(namespace, field_manager, impersonate)
    shown = kubeconfig or os.environ.get("KUBECONFIG") or KUBECONFIG_DEFAULT
    paths = [p for p in shown.split(os.pathsep) if p]
    if not any(os.path.exists(os.path.expanduser(p)) for p in paths):
        raise ConfigError(
            f"kubeconfig '{shown}' does not exist; pass --kubeconfig PATH or set KUBECONFIG"
        )
    fast = _plain(shown, context, namespace, field_manager, impersonate)
    if fast is not None:
        return fast
    import yaml
    from kubernetes.config.config_exception import ConfigException

    try:
        chosen, configuration, acting = _full_load(shown, context, impersonate)
    except ConfigException as exc:
        raise ConfigError(f"cannot use kubeconfig '{shown}': {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read kubeconfig '{shown}': {short(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubeconfig '{shown}' is not valid YAML: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"kubeconfig '{shown}' is malformed ({type(exc).__name__}: {exc})"
        ) from None
    from kubernetes import client

    ns = namespace or (chosen.get("context") or {}).get("namespace") or DEFAULT_NAMESPACE
    return Connection(
        ApiClientTransport(with_headers(client.ApiClient(configuration), acting.headers())),
        ns,
        field_manager,
        kubeconfig=shown,
        context=str(chosen["name"]),
        server=str(configuration.host),
        impersonation=acting,
    )


def context_names(kubeconfig: str | None = None) -> list[str]:
    """The names of every context in the kubeconfig (`--all-contexts`), in the file's
    order, each once. Raises ConfigError naming the kubeconfig when it is missing,
    unreadable or holds no context."""
    shown = kubeconfig or os.environ.get("KUBECONFIG") or KUBECONFIG_DEFAULT
    paths = [p for p in shown.split(os.pathsep) if p]
    if not any(os.path.exists(os.path.expanduser(p)) for p in paths):
        raise ConfigError(
            f"kubeconfig '{shown}' does not exist; pass --kubeconfig PATH or set KUBECONFIG"
        )
    try:
        contexts: list[dict[str, Any]] = read_plain(shown).contexts
    except NotPlain:
        import yaml
        from kubernetes.config import kube_config
        from kubernetes.config.config_exception import ConfigException

        try:
            merged: Any = cast(Callable[..., Any], kube_config.KubeConfigMerger)(shown)
            doc = merged.config.value if merged.config is not None else {}
        except (OSError, yaml.YAMLError, ConfigException, KeyError, TypeError, ValueError,
                AttributeError) as exc:  # fmt: skip
            raise ConfigError(f"cannot read kubeconfig '{shown}': {short(exc)}") from None
        # The merger keeps each entry as a ConfigNode around its mapping.
        entries = [getattr(c, "value", c) for c in (doc or {}).get("contexts") or []]
        contexts = [c for c in entries if isinstance(c, dict)]
    names = list(dict.fromkeys(str(c.get("name")) for c in contexts if c.get("name")))
    if not names:
        raise ConfigError(f"kubeconfig '{shown}' has no context; --all-contexts needs one")
    return names


def _full_load(
    shown: str, context: str | None, impersonate: Impersonation
) -> tuple[dict[str, Any], Any, Impersonation]:
    """The kubernetes package's loader (exec plugins, proxies, merged lists), after
    refusing what it would ignore; also who to act as (the kubeconfig's impersonation
    under `impersonate`, the flags)."""
    from kubernetes import client
    from kubernetes.config import kube_config

    from spillover_operator.client import exec_plugins

    exec_plugins.install()  # a plugin that never returns can then be stopped (the fleet)
    configuration = client.Configuration()
    # `shown`, not None: the kubernetes package reads $KUBECONFIG once, when imported.
    # The kubernetes package ships py.typed but leaves its config loaders unannotated.
    merged: Any = cast(Callable[..., Any], kube_config.KubeConfigMerger)(shown)
    if merged.config is None:
        raise ConfigError(f"kubeconfig '{shown}' holds no configuration")
    make_loader = cast(Callable[..., Any], kube_config.KubeConfigLoader)
    listing: Any = make_loader(config_dict=merged.config, config_base_path=None)
    chosen = _pick_context(listing.list_contexts(), listing.current_context, context, shown)
    loader: Any = make_loader(
        config_dict=merged.config, config_base_path=None, active_context=chosen["name"]
    )
    ctx = chosen.get("context") or {}
    user = loader._user.value if loader._user is not None else {}
    found = check_entries(
        ctx,
        loader._cluster.value,
        user,
        {"context": str(chosen["name"]), "cluster": str(ctx.get("cluster")),
         "user": str(ctx.get("user"))},
        shown,
    )  # fmt: skip
    acting = impersonate.over(found).check(f"kubeconfig '{shown}'")
    loader.load_and_set(configuration)
    if "proxy-url" in loader._cluster.value:
        configuration.no_proxy = ""  # the kubeconfig's proxy is for every request, as kubectl
    if "exec" in user and not (configuration.api_key.get("BearerToken") or configuration.cert_file):
        raise ConfigError(
            f"the exec credential plugin of user '{ctx.get('user')}' in kubeconfig '{shown}' "
            "gave no credentials (its error is printed above); run it yourself to see why"
        )
    # One retry only: an unreachable API server should fail in seconds, not minutes.
    configuration.retries = 1
    return chosen, configuration, acting


def _plain(
    shown: str,
    context: str | None,
    namespace: str | None,
    field_manager: str,
    impersonate: Impersonation,
) -> Connection | None:
    """A Connection over plain HTTP when the kubeconfig needs nothing more (see
    `client.transport`), else None (the full loader then reads it and names problems)."""
    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return None  # the kubernetes package honours HTTPS_PROXY and NO_PROXY, as kubectl
    try:
        config = read_plain(shown)
        try:
            chosen = _pick_context(config.contexts, config.active, context, shown)
        except ConfigError:
            return None  # the full loader says the same, with its own checks first
        acting = impersonate.over(_plain_impersonation(config.doc, chosen, shown))

        def full_client() -> Any:
            from kubernetes import client

            _, configuration, also = _full_load(shown, context, impersonate)
            return with_headers(client.ApiClient(configuration), also.headers())

        transport = plain_transport(shown, chosen, full_client, acting.headers())
    except NotPlain:
        return None
    ns = namespace or (chosen.get("context") or {}).get("namespace") or DEFAULT_NAMESPACE
    return Connection(
        transport,
        ns,
        field_manager,
        kubeconfig=shown,
        context=str(chosen["name"]),
        server=transport.server,
        impersonation=acting.check(f"kubeconfig '{shown}'"),
    )


def _plain_impersonation(doc: dict[str, Any], chosen: dict[str, Any], shown: str) -> Impersonation:
    """The checked entries' impersonation, or NotPlain when the entries are not all
    there as mappings (the full loader then names what is wrong)."""
    ctx = chosen.get("context")
    if not isinstance(ctx, dict):
        raise NotPlain("a context that is not a mapping")
    entries: dict[str, dict[str, Any]] = {}
    for kind, key in (("clusters", "cluster"), ("users", "user")):
        if key == "user" and not ctx.get("user"):
            entries[key] = {}
            continue
        found = [
            e.get(key)
            for e in doc.get(kind) or []
            if isinstance(e, dict) and e.get("name") == ctx.get(key)
        ]
        if len(found) != 1 or not isinstance(found[0], dict):
            raise NotPlain(f"no single {key} entry {ctx.get(key)!r}")
        entries[key] = found[0]
    names = {"context": str(chosen.get("name")), "cluster": str(ctx.get("cluster")),
             "user": str(ctx.get("user"))}  # fmt: skip
    return check_entries(ctx, entries["cluster"], entries["user"], names, shown)


def _in_cluster(
    namespace: str | None, field_manager: str, impersonate: Impersonation
) -> Connection:
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    try:
        cast(Callable[..., None], config.load_incluster_config)(client_configuration=configuration)
    except ConfigException as exc:
        raise ConfigError(f"cannot load the in-cluster configuration: {exc}") from None
    configuration.retries = 1
    ns = namespace or _in_cluster_namespace() or DEFAULT_NAMESPACE
    return Connection(
        ApiClientTransport(with_headers(client.ApiClient(configuration), impersonate.headers())),
        ns,
        field_manager,
        kubeconfig=IN_CLUSTER,
        server=str(configuration.host),
        impersonation=impersonate,
    )


def _pick_context(
    contexts: list[dict[str, Any]] | None,
    active: dict[str, Any] | None,
    wanted: str | None,
    shown: str,
) -> dict[str, Any]:
    if wanted is None:
        if not active:
            raise ConfigError(f"kubeconfig '{shown}' has no current-context; pass --context NAME")
        return active
    for ctx in contexts or []:
        if ctx.get("name") == wanted:
            return ctx
    names = ", ".join(sorted(str(c.get("name")) for c in contexts or [])) or "none"
    raise ConfigError(f"context '{wanted}' is not in kubeconfig '{shown}' (contexts: {names})")


def _in_pod() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _use_in_cluster(kubeconfig: str | None, context: str | None) -> bool:
    if kubeconfig or context or os.environ.get("KUBECONFIG"):
        return False
    if os.path.exists(os.path.expanduser(KUBECONFIG_DEFAULT)):
        return False
    return _in_pod()


def _in_cluster_namespace() -> str | None:
    try:
        with open(_SA_NAMESPACE, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def short(exc: BaseException) -> str:
    """An exception in one short line (its reason when it has one)."""
    reason = getattr(exc, "reason", None)
    text = str(reason or exc)
    return text if len(text) < 300 else text[:300] + "..."
