"""Benchmarks, one folder each (reader, metrics, adapter, generator), and the one registry of them
(:mod:`vsbench.benchmarks.registry`); ``base`` is what an adapter is to the similarity engine."""
