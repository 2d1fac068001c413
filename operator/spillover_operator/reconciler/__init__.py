"""One reconciliation of a SpilloverPolicy, as plain functions the kopf handlers call.

`reconcile` plans and applies a policy to its WRC Deployment and reports the outcome
(status, Events); `recipe_reconcile` follows the values to the recipe mcp-host pods and
refreshes them where the policy asks. They decide with `spillover_operator.domain` and
act through `spillover_operator.client`; when to run them is the handlers' business
(`spillover_operator.handlers`, wired in `main.py`).
"""
