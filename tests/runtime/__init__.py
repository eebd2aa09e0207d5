"""Tests of instinct_serve.runtime."""
