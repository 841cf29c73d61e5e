"""Hypothesis strategies for chaoslight schedules (``chaoslight.strategies``)."""
