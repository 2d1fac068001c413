"""The local Kubernetes control plane for the tests (see README.md in this folder)."""
