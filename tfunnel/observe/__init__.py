"""Observing the gateway: the audit log and the counters behind /health and /metrics."""
