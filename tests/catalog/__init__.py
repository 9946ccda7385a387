"""Tests of the catalog layer."""
