# Excerpt vendored UNMODIFIED from facebookresearch/sscd-copy-detection at commit
# 95902662f2217a5f4aa45f2a3fc70a01dfd3b66a, from sscd/copydays_eval.py: the function ``evaluate`` below is copied verbatim.
# License: MIT, Copyright (c) Meta Platforms, Inc. and affiliates (see LICENSE-sscd in this folder).
# The imports are ours: the original imports classy_vision and the inference stack at module level.
# Used only by the parity tests, which run this code against vsbench.
# ruff: noqa

import faiss
import numpy as np

from tests.originals.sscd_copydays import Copydays


def evaluate(
    embeddings, distractors, train, copydays: Copydays, index_type: str, k=100
):
    D = embeddings.shape[1]
    faiss_index = faiss.index_factory(D, index_type)
    if not faiss_index.is_trained:
        assert (
            train is not None
        ), f"A training dataset must be provided for {index_type} search"
        faiss_index.train(train)
    faiss_index.add(copydays.get_block_embeddings(embeddings, "original"))
    faiss_index.add(distractors)
    distances, ids = faiss_index.search(embeddings, k)
    assert np.isfinite(
        distances
    ).all(), "Non-finite distances found; this often means whitening failed"
    metrics = copydays.eval_result(ids, distances)
    metrics = dict(strong_mAP=metrics["strong mAP"], overall_uAP=metrics["macro AP"])
    return metrics
