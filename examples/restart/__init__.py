"""Restart examples: programs that must survive a crash (or a preemption) and a restart."""
