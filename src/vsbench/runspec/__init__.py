"""What a run is, declared and checked once: a similarity run (run) and the nightly suite of them (suite)."""
