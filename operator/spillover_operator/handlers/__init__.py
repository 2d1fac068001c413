"""Thin kopf handlers: they turn kopf's arguments into calls of the domain functions in
`spillover_operator.reconciler.reconcile` and record metrics. `spillover_operator.main` registers
them."""
