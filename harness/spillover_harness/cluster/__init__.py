"""Cluster mode's building blocks for stages `minikube` and `dev` on a real platform
(docs/harness.md): what the cluster driver (`drivers/cluster/`) uses. The stage
around the driver is in `stages/` (`cluster_stage`, `cluster_plan`, `memory_lane`).
Every API call goes through `spillover_operator.client`.

- `kubeconn`: the connection (kubeconfig, context, namespace) and its errors;
- `configs`: a configuration applied through the SpilloverPolicy and verified on the
  WRC Deployment, and the policy restored at the end of the stage;
- `starters`: starting and following a run (custom resource or HTTP execute endpoint);
- `observe`: pod logs for a run's window, `.spill` checks by exec, image digests;
- `recipe_pods`: the values in effect on the recipe's mcp-host pods;
- `blocks`: the Prometheus counters of each configuration block, cross-checked;
- `version`: the mcp-host version the stage validates;
- `platform_lane`: the platform's own T2 lane, run before stage `minikube`;
- `preflight`: the checklist run before a stage.
"""
