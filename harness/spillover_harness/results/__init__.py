"""What a stage leaves on disk: run records, the stage directory, the verdict schema
and their checks."""
