"""Tests of the hub layer."""
