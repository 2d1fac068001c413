"""spillover-ops operator: the SpilloverPolicy custom resource made real on the WRC Deployment."""
