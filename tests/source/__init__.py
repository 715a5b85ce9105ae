"""Tests of what a user wrote, read safely (runner.source)."""
