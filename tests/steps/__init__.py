"""Tests of the step types, cards and imaging (runner.steps)."""
