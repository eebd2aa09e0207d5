"""Test plumbing: see tests/conftest.py."""
