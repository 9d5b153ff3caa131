"""Shared fixtures. Anything named fake_* is a test double and never leaves tests/."""
