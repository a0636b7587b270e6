"""Benchmarks of layoutopt (run from a checkout): ``python -m benchmarks.solvers``."""
