"""What to run and how often: the matrix and the simulator parameters it carries, then
how many repetitions the rule needs (`false_fail`) and which cells get more (`adaptive`).
The matrix sits at the bottom of the harness's layers; the repetitions judge through
`evaluate/` and sit above it (pyproject `harness-layers`)."""
