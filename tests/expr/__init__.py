"""Tests of the expression language, rules and checks, values in shell (runner.expr)."""
