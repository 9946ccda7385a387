"""Prometheus gateway: the only package importing prometheus-api-client."""
