"""Drivers run one job of the matrix somewhere and return its record: `base` (the
interface the runner calls, and `StageAbort`), `sim` (the simulator, stage `sim`) and
`cluster` (a platform, stages `minikube` and `dev`; the stage around it is
`spillover_harness.stages.cluster_stage`)."""
