"""The one door to the Kubernetes API for the operator, spilloverctl and the harness.

- `connection`: `connect` (kubeconfig/context or the in-cluster service account) and
  `Connection` (the API client, the namespace, who we are, how to name us in messages);
- `policies`: read, list and patch SpilloverPolicies (spec and status);
- `deployments`: read the target (WRC) Deployment, what is in effect on it, patch its env;
- `retry`: the one conflict retry;
- `events`: Events, one body for everyone;
- `leases`: the operator's heartbeat Lease (read by `spilloverctl status`);
- `transport` / `watch`: how requests travel (plain HTTP or the kubernetes ApiClient),
  and following changes with watches;
- `observe` / `waiting`: the status report of a policy, and waiting until it is in
  effect (progress through a callback);
- `configmaps`: the ConfigMap lookup env resolution reads (`resolved_env`), and when a
  ConfigMap last changed (`ConfigMapReader`: a pod read it when it started);
- `pods`: list pods by label selector, and what a pod's container resolves the
  variables to (`pod_values`); ReplicaSets (a pod's owner), the rollout restart of a
  Deployment/StatefulSet and deleting a pod (refreshing recipe pods);
- `custom` / `discovery`: other custom resources, the server version, the CRD;
- `errors`: the error types (no exit codes: the command lines map them).

Objects travel as API JSON dicts, decoded from what the server sent.
"""

from spillover_operator.client.configmaps import ChangedAt, ConfigMapReader, config_map_lookup
from spillover_operator.client.connection import (
    DEFAULT_NAMESPACE,
    REQUEST_TIMEOUT,
    Connection,
    connect,
)
from spillover_operator.client.custom import (
    CustomResource,
    create_object,
    delete_object,
    get_object,
    is_served,
)
from spillover_operator.client.deployments import (
    env_in_effect,
    find_deployment,
    find_target,
    get_deployment,
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
    Forbidden,
    NotFound,
    NotServed,
    OperatorRefused,
    Rejected,
    TimedOut,
    Unauthorized,
)
from spillover_operator.client.events import event_body, post_event
from spillover_operator.client.leases import find_lease, renew_lease
from spillover_operator.client.observe import observe
from spillover_operator.client.pods import (
    SelectorError,
    delete_pod,
    list_pods,
    list_replica_sets,
    observe_recipe_pods,
    pod_container,
    pod_values,
    restart_workload,
    selector_string,
)
from spillover_operator.client.policies import (
    find_policy,
    get_policy,
    list_policies,
    patch_policy,
    patch_policy_status,
)
from spillover_operator.client.retry import retry_on_conflict
from spillover_operator.client.waiting import (
    REFUSED_REASONS,
    ProgressCallback,
    WaitProgress,
    wait_until_settled,
)

__all__ = [
    "DEFAULT_NAMESPACE",
    "REFUSED_REASONS",
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
    "Forbidden",
    "NotFound",
    "NotServed",
    "OperatorRefused",
    "ProgressCallback",
    "Rejected",
    "SelectorError",
    "TimedOut",
    "Unauthorized",
    "WaitProgress",
    "check_reachable",
    "config_map_lookup",
    "connect",
    "create_object",
    "delete_object",
    "delete_pod",
    "env_in_effect",
    "event_body",
    "find_deployment",
    "find_lease",
    "find_policy",
    "find_target",
    "get_deployment",
    "get_object",
    "get_policy",
    "is_served",
    "list_pods",
    "list_policies",
    "list_replica_sets",
    "observe",
    "observe_recipe_pods",
    "patch_deployment_env",
    "patch_policy",
    "patch_policy_status",
    "pod_container",
    "pod_values",
    "policy_crd_installed",
    "post_event",
    "renew_lease",
    "restart_workload",
    "retry_on_conflict",
    "selector_string",
    "server_version",
    "wait_until_settled",
]
