"""Hostile expressions and templates: each refused quickly, in bounded memory, touching nothing."""
