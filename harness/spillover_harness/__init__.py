"""spillover-ops validation harness: runs the spillover matrix and decides the default."""
