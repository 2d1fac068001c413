"""The cluster profiles shipped with the harness, as data (`minikube.yaml`, `dev.yaml`,
`local.yaml`), loaded by name (`load_profile("dev")`); their schema is the package
around this one (`spillover_harness.profile`)."""
