"""Training: base models, SFT warm start, the RL cycle (DESIGN §2, §7, §8)."""
