"""Cluster mode: stages `minikube` and `dev` on a real platform (docs/harness.md).

- `kubeconn`: the connection (kubeconfig, context, namespace) and its errors;
- `configs`: a configuration applied through the SpilloverPolicy and verified on the
  WRC Deployment, and the policy restored at the end of the stage;
- `plan`: the order of a cluster stage (configuration blocks, interleaved by round);
- `starters`: starting and following a run (custom resource or HTTP execute endpoint);
- `observe`: pod logs for a run's window, `.spill` checks by exec, image digests;
- `driver`: `ClusterDriver`, the runner's driver for a cluster;
- `preflight`: the checklist run before a stage;
- `stage`: a whole cluster stage (preflight, Stage 1 gate, matrix, report).
"""
