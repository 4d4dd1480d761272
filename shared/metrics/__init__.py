"""Prometheus metrics read from Redis at scrape time (README: Metrics)."""
