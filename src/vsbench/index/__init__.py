"""FAISS search as vsbench uses it: settings (codecs, score normalization), codec, in-memory search,
search requests (plan) and persisted, sharded indexes (store); lowest first."""
