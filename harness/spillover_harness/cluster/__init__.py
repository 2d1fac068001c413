"""Cluster mode: stages `minikube` and `dev` on a real platform (docs/harness.md): the
stage around the cluster driver (`drivers/cluster.py`, beside the simulator's), and
what the driver uses. Every API call goes through `spillover_operator.client`.

- `kubeconn`: the connection (kubeconfig, context, namespace) and its errors;
- `configs`: a configuration applied through the SpilloverPolicy and verified on the
  WRC Deployment, and the policy restored at the end of the stage;
- `plan`: the order of a cluster stage (configuration blocks, interleaved by round);
- `starters`: starting and following a run (custom resource or HTTP execute endpoint);
- `observe`: pod logs for a run's window, `.spill` checks by exec, image digests;
- `recipe_pods`: the values in effect on the recipe's mcp-host pods;
- `blocks`: the Prometheus counters of each configuration block, cross-checked;
- `version`: the mcp-host version the stage validates;
- `platform_lane`: the platform's own T2 lane, run before stage `minikube`;
- `preflight`: the checklist run before a stage;
- `stage`: a whole cluster stage (preflight, Stage 1 gate, matrix, report).
"""
