import os

from hypothesis import HealthCheck, settings

# CI replays the same examples every run (a red CI must be reproducible);
# `HYPOTHESIS_PROFILE=explore` searches wider and with fresh randomness.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
