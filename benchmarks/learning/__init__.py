"""The learning lab (:mod:`.run`) and its probes."""
