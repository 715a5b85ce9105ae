"""Local protocol servers and step-test helpers for the provider tests."""
