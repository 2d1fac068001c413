"""Planning a stage before a cluster is spent: how often the rule would fail a
configuration as good as the baseline, and the repetitions that keep it rare."""
