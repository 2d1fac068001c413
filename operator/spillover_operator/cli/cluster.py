"""The cluster side of spilloverctl: kubeconfig handling and API calls whose failures become
clear messages (naming the kubeconfig, the context and the permission) and exit codes."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from spillover_operator.constants import GROUP, KIND, PLURAL, VERSION
from spillover_operator.envplan import EnvPlan
from spillover_operator.kube import apply_env_patch

from .errors import EXIT_API, EXIT_NOT_FOUND, CliError

DEFAULT_NAMESPACE = "clerum"
_KUBECONFIG_DEFAULT = "~/.kube/config"
_IN_CLUSTER = "(in-cluster service account)"
# Shown in managedFields of the policy: who flipped the switch.
FIELD_MANAGER = "spilloverctl"
# (connect, read) seconds for every request: a dead API server must not hang the kill switch.
_REQUEST_TIMEOUT = (10.0, 30.0)

T = TypeVar("T")

# The kubernetes package ships py.typed but leaves its config loaders unannotated.
_load_incluster_config = cast(Callable[..., None], config.load_incluster_config)
_load_kube_config = cast(Callable[..., None], config.load_kube_config)
_list_kube_config_contexts = cast(
    Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]], config.list_kube_config_contexts
)
JsonDict = dict[str, Any]


class ConflictError(Exception):
    """The object changed between our read and our write (HTTP 409)."""


@dataclass
class Cluster:
    """One connection: the API clients plus what to name in error messages."""

    api_client: client.ApiClient
    kubeconfig: str
    context: str
    server: str
    namespace: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api_client)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @property
    def where(self) -> str:
        """`context 'x' in kubeconfig 'y'`, for messages."""
        if self.kubeconfig == _IN_CLUSTER:
            return f"the in-cluster service account (API server {self.server})"
        return (
            f"context '{self.context}' in kubeconfig '{self.kubeconfig}' (API server {self.server})"
        )

    # ---- reads ---------------------------------------------------------------------------

    def get_policy(self, name: str) -> JsonDict:
        with self._translate("get", PLURAL, f"{KIND} '{name}'", GROUP):
            resp = self.custom.get_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                _preload_content=False,
                _request_timeout=_REQUEST_TIMEOUT,
            )
            return _decode(resp)

    def get_deployment(self, name: str) -> JsonDict:
        with self._translate("get", "deployments", f"Deployment '{name}'", "apps"):
            resp = self.apps.read_namespaced_deployment(
                name, self.namespace, _preload_content=False, _request_timeout=_REQUEST_TIMEOUT
            )
            return _decode(resp)

    def find_deployment(self, name: str) -> JsonDict | None:
        """The Deployment, or None when it does not exist (other errors still raise)."""
        try:
            return self.get_deployment(name)
        except CliError as err:
            if err.exit_code == EXIT_NOT_FOUND:
                return None
            raise

    # ---- writes --------------------------------------------------------------------------

    def merge_patch_policy(self, name: str, patch: JsonDict) -> JsonDict:
        with self._translate("patch", PLURAL, f"{KIND} '{name}'", GROUP):
            resp = self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                patch,
                field_manager=FIELD_MANAGER,
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=_REQUEST_TIMEOUT,
            )
            return _decode(resp)

    def apply_deployment_plan(self, name: str, plan: EnvPlan) -> JsonDict:
        """Send the plan's strategic merge patch (resourceVersion precondition included)."""
        with self._translate("patch", "deployments", f"Deployment '{name}'", "apps"):
            try:
                return _as_dict(apply_env_patch(self.apps, self.namespace, name, plan))
            except ApiException as exc:
                if exc.status == 409:
                    raise ConflictError(str(exc.reason)) from None
                raise

    def record_event(
        self, obj: JsonDict, *, reason: str, message: str, event_type: str = "Normal"
    ) -> str | None:
        """Create a core/v1 Event about `obj`. Returns None on success, else why it was not
        recorded (an Event is a courtesy: lacking RBAC for it must not fail the kill switch)."""
        meta = obj.get("metadata", {})
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: JsonDict = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'spilloverctl')}.",
                "namespace": self.namespace,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": self.namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": "spilloverctl"},
            "reportingComponent": "spilloverctl",
            "reportingInstance": socket.gethostname()[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            with self._translate("create", "events", "Event", ""):
                event = client.CoreV1Event.from_dict(body)
                if event is None:
                    return "the client could not build the Event"
                self.core.create_namespaced_event(
                    self.namespace, event, _request_timeout=_REQUEST_TIMEOUT
                )
        except CliError as err:
            return err.message
        return None

    # ---- error translation ---------------------------------------------------------------

    @contextmanager
    def _translate(self, verb: str, resource: str, what: str, group: str) -> Iterator[None]:
        full = f"{resource}.{group}" if group else resource
        try:
            yield
        except ApiException as exc:
            raise self._api_error(exc, verb, full, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise CliError(
                f"cannot reach the API server using {self.where}: {_short(exc)}. "
                "Check the cluster is up and the kubeconfig/--context point at it.",
                EXIT_API,
            ) from None

    def _api_error(self, exc: ApiException, verb: str, resource: str, what: str) -> CliError:
        status = exc.status or 0
        server_message = _status_message(exc)
        if status == 404:
            if _names_an_object(exc):
                return CliError(
                    f"{what} not found in namespace '{self.namespace}' ({self.where}). "
                    "Is the namespace right (-n)?",
                    EXIT_NOT_FOUND,
                )
            return CliError(
                f"{what}: the API server does not serve {resource} ({server_message}). "
                f"Is the SpilloverPolicy CRD installed in the cluster of {self.where}?",
                EXIT_NOT_FOUND,
            )
        if status == 401:
            return CliError(
                f"unauthorized: the API server rejected the credentials of {self.where} "
                f"({server_message}). Log in again or pick another --context.",
                EXIT_API,
            )
        if status == 403:
            return CliError(
                f"forbidden: the user of {self.where} may not {verb} {resource} in namespace "
                f"'{self.namespace}' ({server_message}). Grant that permission (Role/RoleBinding) "
                "or use a context that has it.",
                EXIT_API,
            )
        if status in (400, 422):
            return CliError(
                f"the API server rejected the {verb} of {what}: {server_message}", EXIT_API
            )
        return CliError(
            f"API error {status} {exc.reason or ''} on {verb} {resource}: {what} "
            f"({self.where}): {server_message}",
            EXIT_API,
        )


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Cluster:
    """Load the kubeconfig (or the in-cluster service account) and pick the namespace:
    `-n`, else the context's namespace, else `clerum`."""
    shown = kubeconfig or os.environ.get("KUBECONFIG") or _KUBECONFIG_DEFAULT
    configuration = client.Configuration()
    if _use_in_cluster(kubeconfig, context):
        try:
            _load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise CliError(f"cannot load the in-cluster configuration: {exc}", EXIT_API) from None
        ns = namespace or _in_cluster_namespace() or DEFAULT_NAMESPACE
        configuration.retries = 1
        return Cluster(client.ApiClient(configuration), _IN_CLUSTER, "", configuration.host, ns)
    paths = [p for p in shown.split(os.pathsep) if p]
    if not any(os.path.exists(os.path.expanduser(p)) for p in paths):
        raise CliError(
            f"kubeconfig '{shown}' does not exist; pass --kubeconfig PATH or set KUBECONFIG",
            EXIT_API,
        )
    try:
        contexts, active = _list_kube_config_contexts(config_file=kubeconfig)
        chosen = _pick_context(contexts, active, context, shown)
        _load_kube_config(
            config_file=kubeconfig,
            context=chosen["name"],
            client_configuration=configuration,
            persist_config=False,
        )
    except ConfigException as exc:
        raise CliError(f"cannot use kubeconfig '{shown}': {exc}", EXIT_API) from None
    except OSError as exc:
        raise CliError(f"cannot read kubeconfig '{shown}': {_short(exc)}", EXIT_API) from None
    except yaml.YAMLError as exc:
        raise CliError(f"kubeconfig '{shown}' is not valid YAML: {exc}", EXIT_API) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CliError(
            f"kubeconfig '{shown}' is malformed ({type(exc).__name__}: {exc})", EXIT_API
        ) from None
    # One retry only: an unreachable API server should fail in seconds, not minutes.
    configuration.retries = 1
    ns = namespace or (chosen.get("context") or {}).get("namespace") or DEFAULT_NAMESPACE
    return Cluster(
        client.ApiClient(configuration), shown, str(chosen["name"]), configuration.host, ns
    )


def _pick_context(
    contexts: list[JsonDict] | None, active: JsonDict | None, wanted: str | None, shown: str
) -> JsonDict:
    if wanted is None:
        if not active:
            raise CliError(
                f"kubeconfig '{shown}' has no current-context; pass --context NAME", EXIT_API
            )
        return active
    for ctx in contexts or []:
        if ctx.get("name") == wanted:
            return ctx
    names = ", ".join(sorted(str(c.get("name")) for c in contexts or [])) or "none"
    raise CliError(
        f"context '{wanted}' is not in kubeconfig '{shown}' (contexts: {names})", EXIT_API
    )


def _use_in_cluster(kubeconfig: str | None, context: str | None) -> bool:
    if kubeconfig or context or os.environ.get("KUBECONFIG"):
        return False
    if os.path.exists(os.path.expanduser(_KUBECONFIG_DEFAULT)):
        return False
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _in_cluster_namespace() -> str | None:
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _decode(response: Any) -> JsonDict:
    data = response.data
    try:
        decoded = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except (TypeError, ValueError) as exc:
        raise CliError(f"unexpected API response (not JSON): {exc}", EXIT_API) from None
    return _as_dict(decoded)


def _as_dict(obj: object) -> JsonDict:
    if not isinstance(obj, dict):
        raise CliError(f"unexpected API response (not an object): {obj!r:.200}", EXIT_API)
    return obj


def _status_payload(exc: ApiException) -> JsonDict:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _status_message(exc: ApiException) -> str:
    message = _status_payload(exc).get("message")
    if isinstance(message, str) and message:
        return message
    return str(exc.reason or exc.body or "no details")


def _names_an_object(exc: ApiException) -> bool:
    """A 404 for a missing object carries details.name; one for a resource type the server
    does not know (CRD not installed) does not."""
    details = _status_payload(exc).get("details")
    return isinstance(details, dict) and bool(details.get("name"))


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = str(reason or exc)
    return text if len(text) < 300 else text[:300] + "..."


def retry_on_conflict(fn: Callable[[], T], attempts: int = 5) -> T:
    """Run `fn` again while it raises ConflictError; the last conflict becomes an API error."""
    for _ in range(attempts - 1):
        try:
            return fn()
        except ConflictError:
            continue
    try:
        return fn()
    except ConflictError as exc:
        raise CliError(
            f"the object kept changing under us ({attempts} conflicts in a row): {exc}", EXIT_API
        ) from None
