"""The one door to the Kubernetes API for the operator, spilloverctl and the harness.

- `connection`: `connect` (kubeconfig/context or the in-cluster service account) and
  `Connection` (the API client, the namespace, who we are, how to name us in messages);
- `kubeconfig`: which kubeconfig fields are honoured (the others are refused:
  `UnsupportedKubeconfig`) and impersonation (`Impersonation`, the `--as` flags);
- `policies`: read, list and patch SpilloverPolicies (spec and status);
- `deployments`: read and list Deployments (by label selector too), patch the target's
  env with a planned patch;
- `retry`: the one conflict retry;
- `events`: Events, one body for everyone;
- `identity`: who the API server says we are (`authenticated_user`, a SelfSubjectReview);
- `leases`: the operator's heartbeat Lease (read by `spilloverctl status`) and its
  leader-election Lease (created, and updated under a resourceVersion precondition);
- `transport` / `watch`: how requests travel (plain HTTP or the kubernetes ApiClient),
  and following changes with watches;
- `configmaps`: read one ConfigMap (`get_config_map`), the ConfigMap lookup env
  resolution reads (`resolved_env`), applying a whole ConfigMap (`apply_config_map`,
  the WRC stand-in), and when a ConfigMap last changed (`ConfigMapReader`: a pod read
  it when it started);
- `pods`: list pods by label selector, and what a pod's container resolves the
  variables to (`pod_values`); ReplicaSets (a pod's owner), StatefulSets, what a pod's
  process serves (`proxy_get`), the rollout restart of a Deployment/StatefulSet and
  deleting a pod (refreshing recipe pods);
- `pod_io`: inside a pod's containers: a container's log (`read_pod_log`) and a command
  run by exec (`exec_in_pod`; `ExecFailed` when the exec is refused or fails; refused
  while impersonating: the websocket would carry no Impersonate-* headers);
- `nodes`: a node's kubelet Summary through the node proxy (`node_summary`: the
  containers' working set at the kubelet's housekeeping interval);
- `proxy`: a request to an HTTP endpoint behind the API server's service proxy
  (`proxy_request`: the endpoint's status and body, error statuses included);
- `custom` / `discovery`: other custom resources, the server version, the CRD;
- `errors`: the error types (no exit codes: the command lines map them).

Objects travel as API JSON dicts, decoded from what the server sent. The client knows
no policy: it imports no domain module (make lint's contract `client-imports-no-domain`;
only `resource`, the API coordinates, and the Kubernetes rules `labels` and
`resolved_env`). What needs both, the status report of a policy, waiting until a change
is in effect and judging the recipe pods, is `spillover_operator.observed`.

The names below are imported on first use (PEP 562): `spilloverctl kill` needs the
connection and the policy calls only, and every module it does not import is start-up
time it does not pay (`docs/spilloverctl.md`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spillover_operator import lazy_names

if TYPE_CHECKING:
    from spillover_operator.client.configmaps import (
        ChangedAt,
        ConfigMapReader,
        apply_config_map,
        config_map_lookup,
        get_config_map,
    )
    from spillover_operator.client.connection import (
        DEFAULT_NAMESPACE,
        REQUEST_TIMEOUT,
        Connection,
        connect,
        context_names,
    )
    from spillover_operator.client.custom import (
        CustomResource,
        create_object,
        delete_object,
        get_object,
        is_served,
    )
    from spillover_operator.client.deployments import (
        EnvPatch,
        apply_deployment,
        find_deployment,
        get_deployment,
        list_deployments,
        patch_deployment_env,
    )
    from spillover_operator.client.discovery import (
        check_reachable,
        policy_crd_installed,
        server_version,
    )
    from spillover_operator.client.errors import (
        ApiError,
        ApiUnavailable,
        ClientError,
        ConfigError,
        Conflict,
        ExecFailed,
        Forbidden,
        NotFound,
        NotServed,
        OperatorRefused,
        Rejected,
        TimedOut,
        Unauthorized,
        UnsupportedKubeconfig,
        WriteRefused,
    )
    from spillover_operator.client.events import event_body, post_event
    from spillover_operator.client.identity import authenticated_user
    from spillover_operator.client.kubeconfig import Impersonation, impersonation_from_flags
    from spillover_operator.client.leases import (
        create_lease,
        find_lease,
        renew_lease,
        update_lease,
    )
    from spillover_operator.client.nodes import node_summary
    from spillover_operator.client.pod_io import exec_in_pod, read_pod_log
    from spillover_operator.client.pods import (
        delete_pod,
        get_stateful_set,
        list_pods,
        list_replica_sets,
        pod_container,
        pod_values,
        proxy_get,
        restart_workload,
        selector_string,
    )
    from spillover_operator.client.policies import (
        find_policy,
        get_policy,
        list_policies,
        patch_policy,
        patch_policy_status,
        remove_policy_finalizer,
    )
    from spillover_operator.client.proxy import proxy_request
    from spillover_operator.client.retry import retry_on_conflict
    from spillover_operator.domain.labels import SelectorError

# Which module defines each public name: a submodule, or (SelectorError, the error of
# the label selectors the client renders) the domain leaf `labels`.
_WHERE: dict[str, str] = {
    "ApiError": "errors",
    "ApiUnavailable": "errors",
    "ChangedAt": "configmaps",
    "ClientError": "errors",
    "ConfigError": "errors",
    "ConfigMapReader": "configmaps",
    "Conflict": "errors",
    "Connection": "connection",
    "CustomResource": "custom",
    "DEFAULT_NAMESPACE": "connection",
    "ExecFailed": "errors",
    "Forbidden": "errors",
    "NotFound": "errors",
    "NotServed": "errors",
    "OperatorRefused": "errors",
    "REQUEST_TIMEOUT": "connection",
    "Rejected": "errors",
    "SelectorError": "spillover_operator.domain.labels",
    "TimedOut": "errors",
    "Unauthorized": "errors",
    "WriteRefused": "errors",
    "UnsupportedKubeconfig": "errors",
    "Impersonation": "kubeconfig",
    "impersonation_from_flags": "kubeconfig",
    "check_reachable": "discovery",
    "config_map_lookup": "configmaps",
    "connect": "connection",
    "context_names": "connection",
    "create_object": "custom",
    "delete_object": "custom",
    "delete_pod": "pods",
    "exec_in_pod": "pod_io",
    "EnvPatch": "deployments",
    "get_stateful_set": "pods",
    "proxy_get": "pods",
    "event_body": "events",
    "apply_config_map": "configmaps",
    "apply_deployment": "deployments",
    "authenticated_user": "identity",
    "find_deployment": "deployments",
    "find_lease": "leases",
    "create_lease": "leases",
    "update_lease": "leases",
    "find_policy": "policies",
    "get_config_map": "configmaps",
    "get_deployment": "deployments",
    "get_object": "custom",
    "get_policy": "policies",
    "is_served": "custom",
    "list_deployments": "deployments",
    "list_pods": "pods",
    "node_summary": "nodes",
    "list_policies": "policies",
    "list_replica_sets": "pods",
    "patch_deployment_env": "deployments",
    "patch_policy": "policies",
    "patch_policy_status": "policies",
    "remove_policy_finalizer": "policies",
    "pod_container": "pods",
    "pod_values": "pods",
    "proxy_request": "proxy",
    "read_pod_log": "pod_io",
    "policy_crd_installed": "discovery",
    "post_event": "events",
    "renew_lease": "leases",
    "restart_workload": "pods",
    "retry_on_conflict": "retry",
    "selector_string": "pods",
    "server_version": "discovery",
}

__all__ = [
    "DEFAULT_NAMESPACE",
    "REQUEST_TIMEOUT",
    "ApiError",
    "ApiUnavailable",
    "ChangedAt",
    "ClientError",
    "ConfigError",
    "ConfigMapReader",
    "Conflict",
    "Connection",
    "CustomResource",
    "EnvPatch",
    "ExecFailed",
    "Forbidden",
    "Impersonation",
    "NotFound",
    "NotServed",
    "OperatorRefused",
    "Rejected",
    "SelectorError",
    "TimedOut",
    "Unauthorized",
    "UnsupportedKubeconfig",
    "WriteRefused",
    "apply_config_map",
    "apply_deployment",
    "authenticated_user",
    "check_reachable",
    "config_map_lookup",
    "connect",
    "context_names",
    "create_lease",
    "create_object",
    "delete_object",
    "delete_pod",
    "event_body",
    "exec_in_pod",
    "find_deployment",
    "find_lease",
    "find_policy",
    "get_config_map",
    "get_deployment",
    "get_object",
    "get_policy",
    "get_stateful_set",
    "impersonation_from_flags",
    "is_served",
    "list_deployments",
    "list_pods",
    "list_policies",
    "list_replica_sets",
    "node_summary",
    "patch_deployment_env",
    "patch_policy",
    "patch_policy_status",
    "pod_container",
    "pod_values",
    "policy_crd_installed",
    "post_event",
    "proxy_get",
    "proxy_request",
    "read_pod_log",
    "remove_policy_finalizer",
    "renew_lease",
    "restart_workload",
    "retry_on_conflict",
    "selector_string",
    "server_version",
    "update_lease",
]


if not TYPE_CHECKING:  # mypy reads the imports above, and no catch-all
    __getattr__, __dir__ = lazy_names.attach(__name__, _WHERE, __all__)
