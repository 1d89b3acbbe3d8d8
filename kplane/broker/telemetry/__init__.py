"""Client telemetry (KIP-714): client-metrics subscriptions, client instances, and the
metrics clients push, exposed on the broker's Prometheus registry."""
