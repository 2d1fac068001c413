"""Applying a stage's decision to a SpilloverPolicy: in the cluster (through the client
library) or in a policy manifest of a Git checkout (`apply-decision`, docs/harness.md)."""
