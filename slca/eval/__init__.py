"""Evaluation: in-domain, BFCL and τ²-bench scoring."""
