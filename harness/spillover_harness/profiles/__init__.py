"""Cluster profiles shipped with the harness (`minikube.yaml`, `dev.yaml`)."""
