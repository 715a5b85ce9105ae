"""Tests of gates, thumbnails, run views (runner.review)."""
