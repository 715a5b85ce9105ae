"""Tests of loading and compiling a pipeline (runner.pipeline)."""
