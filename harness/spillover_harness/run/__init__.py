"""Running a stage: the runner that spends runs through a driver, its progress, concurrency."""
