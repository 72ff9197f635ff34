# Excerpts vendored UNMODIFIED from facebookresearch/sscd-copy-detection at commit
# 95902662f2217a5f4aa45f2a3fc70a01dfd3b66a, from sscd/datasets/disc.py: every function, class and method body below is copied verbatim.
# License: MIT, Copyright (c) Meta Platforms, Inc. and affiliates (see LICENSE-sscd in this folder).
# The imports are ours, and so is the class statement holding the SPLIT constants and
# the ground truth as DISCEvalDataset holds them (its constructor reads image folders): the originals import their whole training stack at module level.
# Used only by the parity tests, which run this code against vsbench.
# ruff: noqa

from typing import Dict

from tests.originals.sscd_isc_io import knn_match_and_make_predictions
from tests.originals.sscd_isc_metrics import Metrics, evaluate


class DISCEvalDataset:
    """Ours: DISCEvalDataset without its image folders; ``retrieval_eval_splits`` is verbatim."""

    SPLIT_REF = 0
    SPLIT_QUERY = 1
    SPLIT_TRAIN = 2

    def __init__(self, gt):
        self.gt = gt

    def retrieval_eval_splits(
        self,
        query_ids,
        query_embeddings,
        ref_ids,
        ref_embeddings,
        use_gpu=False,
        k=10,
        global_candidates=False,
        **kwargs
    ) -> Dict[str, float]:
        query_names = ["Q%05d" % i for i in query_ids]
        ref_names = ["R%06d" % i for i in ref_ids]
        if global_candidates:
            predictions = match_and_make_predictions(
                query_embeddings,
                query_names,
                ref_embeddings,
                ref_names,
                num_results=k * len(query_names),
                ngpu=-1 if use_gpu else 0,
                **kwargs,
            )
        else:
            predictions = knn_match_and_make_predictions(
                query_embeddings,
                query_names,
                ref_embeddings,
                ref_names,
                k=k,
                ngpu=-1 if use_gpu else 0,
                **kwargs,
            )
        results: Metrics = evaluate(self.gt, predictions)
        return {
            "uAP": results.average_precision,
            "accuracy-at-1": results.recall_at_rank1,
            "recall-at-p90": results.recall_at_p90 or 0.0,
        }
