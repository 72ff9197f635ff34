"""Uncertainty: per-unit outcomes of an evaluation (``units``), seeded bootstrap intervals and paired
comparisons over them (``resample``, ``compare``), and the resamplable statistics (``statistics``)."""
