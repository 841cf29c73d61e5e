"""Preemption examples: Lightning's default SIGTERM handling and the agreement that works."""
