"""The operator's domain: what a SpilloverPolicy means, with no Kubernetes I/O.

Pure functions and types the other layers call: the policy model (`model`: the one
place a spec field, its variable, its bounds and its status key are written), parsing
and validating a spec (`policy`), the env a policy renders to and the patch a
Deployment needs (`envplan`), what is in effect and what a verdict is (`assess`,
`status`, `rollout`, `recipe_pods`), the allow-lists and settings read at start-up
(`allowlist`, `settings`), leader election's and the heartbeat's rules (`leadership`,
`heartbeat`), strict reading of files (`strict_load`). Nothing here imports
`kubernetes`, `kopf`, `spillover_operator.client` or `spillover_operator.observed`
(the contract `operator-domain-is-pure` in pyproject.toml, run by `make lint`).

The layers, bottom up:

    domain/      pure rules (this package)
    client/      the one door to the API server (HTTP; knows no policy)
    observed/    reading what is in effect (client + domain)
    reconciler/  one reconciliation: plan, write, report (client + domain)
    handlers/, main.py   the kopf wiring (when to reconcile)
    cli/         spilloverctl
"""
