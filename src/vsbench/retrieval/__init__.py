"""The similarity engine: features, embedding any registered model over a benchmark's image sets
(embed), and the engine that indexes, searches and scores one run (engine)."""
