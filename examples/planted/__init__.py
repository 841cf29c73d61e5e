"""Planted bugs with known minimal failing schedules, each with a fixed twin."""
