"""Tests of the native engine route (instinct_serve.engine)."""
