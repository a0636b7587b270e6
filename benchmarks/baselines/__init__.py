"""Comparison baselines that are not layoutopt methods (re-implementations of prior work)."""
