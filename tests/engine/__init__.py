"""Tests of planning and running, end to end on fake (runner.engine)."""
