"""Tests of GPU detection (instinct_serve.hardware, instinct detect)."""
