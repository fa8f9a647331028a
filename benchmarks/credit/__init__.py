"""The credit benchmark (:mod:`.run`), its controlled lab (:mod:`.lab`) and the two-head
bandit (:mod:`.bandit`)."""
