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
from spillover_operator.client.transport import (
    ApiClientTransport,
    HttpTransport,
    NotPlain,
    Transport,
    plain_transport,
    read_plain,
)

DEFAULT_NAMESPACE = "clerum"
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
        """`context 'x' in kubeconfig 'y' (API server z)`, for messages."""
        if self.kubeconfig == IN_CLUSTER:
            return f"the in-cluster service account (API server {self.server})"
        if not self.kubeconfig:
            return f"API server {self.server}"
        return (
            f"context '{self.context}' in kubeconfig '{self.kubeconfig}' (API server {self.server})"
        )


def connect(
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    *,
    field_manager: str,
    prefer_in_cluster: bool = False,
) -> Connection:
    """Load the kubeconfig (or the in-cluster service account) and pick the namespace:
    `namespace`, else the context's namespace, else `clerum`.

    The in-cluster account is used when no kubeconfig is given or found and the process
    runs in a pod; `prefer_in_cluster` (the operator) uses it whenever the process runs
    in a pod. Raises ConfigError naming the kubeconfig and the context.
    """
    if prefer_in_cluster and not (kubeconfig or context) and _in_pod():
        try:
            return _in_cluster(namespace, field_manager)
        except ConfigError:
            pass  # a pod without a service account token: try the kubeconfig
    if _use_in_cluster(kubeconfig, context):
        return _in_cluster(namespace, field_manager)
    shown = kubeconfig or os.environ.get("KUBECONFIG") or KUBECONFIG_DEFAULT
    paths = [p for p in shown.split(os.pathsep) if p]
    if not any(os.path.exists(os.path.expanduser(p)) for p in paths):
        raise ConfigError(
            f"kubeconfig '{shown}' does not exist; pass --kubeconfig PATH or set KUBECONFIG"
        )
    fast = _plain(shown, context, namespace, field_manager)
    if fast is not None:
        return fast
    import yaml
    from kubernetes.config.config_exception import ConfigException

    try:
        chosen, configuration = _full_load(shown, context)
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
        ApiClientTransport(client.ApiClient(configuration)),
        ns,
        field_manager,
        kubeconfig=shown,
        context=str(chosen["name"]),
        server=str(configuration.host),
    )


def _full_load(shown: str, context: str | None) -> tuple[dict[str, Any], Any]:
    """The kubernetes package's loader (exec plugins, auth providers, merged lists)."""
    from kubernetes import client, config

    # The kubernetes package ships py.typed but leaves its config loaders unannotated.
    list_contexts = cast(
        Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]],
        config.list_kube_config_contexts,
    )
    load = cast(Callable[..., None], config.load_kube_config)
    configuration = client.Configuration()
    # `shown`, not None: the kubernetes package reads $KUBECONFIG once, when imported.
    contexts, active = list_contexts(config_file=shown)
    chosen = _pick_context(contexts, active, context, shown)
    load(
        config_file=shown,
        context=chosen["name"],
        client_configuration=configuration,
        persist_config=False,
    )
    # One retry only: an unreachable API server should fail in seconds, not minutes.
    configuration.retries = 1
    return chosen, configuration


def _plain(
    shown: str, context: str | None, namespace: str | None, field_manager: str
) -> Connection | None:
    """A Connection over plain HTTP when the kubeconfig needs nothing more (see
    `client.transport`), else None (the full loader then reads it and names problems)."""
    try:
        config = read_plain(shown)
        try:
            chosen = _pick_context(config.contexts, config.active, context, shown)
        except ConfigError:
            return None  # the full loader says the same, with its own checks first

        def full_client() -> Any:
            from kubernetes import client

            return client.ApiClient(_full_load(shown, context)[1])

        transport = plain_transport(shown, chosen, full_client)
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
    )


def _in_cluster(namespace: str | None, field_manager: str) -> Connection:
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
        ApiClientTransport(client.ApiClient(configuration)),
        ns,
        field_manager,
        kubeconfig=IN_CLUSTER,
        server=str(configuration.host),
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
