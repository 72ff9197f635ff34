"""FAISS codecs (index_factory strings), SSCD score normalization and k-NN candidates."""

from vsbench.index.search import (
    Candidates,
    ScoreNorm,
    SearchError,
    knn,
    parse_codecs,
    parse_score_norm,
    parse_score_norms,
    search,
    search_all,
)

__all__ = [
    "Candidates", "ScoreNorm", "SearchError", "knn", "parse_codecs", "parse_score_norm", "parse_score_norms", "search", "search_all",
]
