"""Kubernetes API gateway: the only package importing the kubernetes client."""
