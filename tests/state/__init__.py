"""Tests of the store, journal, records, gc/verify/repair, the remote cache (runner.state)."""
