"""Rollouts: the multi-turn tool loop and its engines (DESIGN §3, §5)."""
