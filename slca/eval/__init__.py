"""Evaluation: scoring policy rollouts on the in-domain test split and the eval sets."""
