"""gearbox's control plane (`gearbox control`): telemetry ingestion with no loss, a versioned
policy registry that edges and clients poll and hot-swap, learners on a schedule, and a dashboard.
docs/control.md describes the API, the configuration and the deployment."""
