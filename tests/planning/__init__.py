"""Tests of the planning layer."""
