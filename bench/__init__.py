"""Steadyflow benchmarks: ``python -m bench.NAME`` (see docs/benchmarks.md)."""
