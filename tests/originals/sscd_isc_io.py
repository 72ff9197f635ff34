# Excerpts vendored UNMODIFIED from facebookresearch/sscd-copy-detection at commit
# 95902662f2217a5f4aa45f2a3fc70a01dfd3b66a, from sscd/datasets/isc/io.py and sscd/datasets/isc/descriptor_matching.py: every function, class and method body below is copied verbatim.
# License: MIT, Copyright (c) Meta Platforms, Inc. and affiliates (see LICENSE-sscd in this folder).
# The imports are ours: the originals import their whole training stack at module level.
# Used only by the parity tests, which run this code against vsbench.
# ruff: noqa

from typing import List

import faiss
import numpy as np

from tests.originals.sscd_isc_metrics import GroundTruthMatch, PredictedMatch


def read_ground_truth(filename: str) -> List[GroundTruthMatch]:
    """
    Read groundtruth csv file.
    Must contain query_image_id,db_image_id on each line.
    handles the no header version and DD's version with header
    """
    gt_pairs = []
    with open(filename, "r") as cfile:
        for line in cfile:
            line = line.strip()
            if line == "query_id,reference_id":
                continue
            q, db = line.split(",")
            if db == "":
                continue
            gt_pairs.append(GroundTruthMatch(q, db))
    return gt_pairs


def knn_match_and_make_predictions(
    xq, query_image_ids, xb, db_image_ids, k, ngpu=-1, metric=faiss.METRIC_L2
):
    if ngpu == 0 or faiss.get_num_gpus() == 0:
        D, I = faiss.knn(xq, xb, k, metric)
    else:
        d = xq.shape[1]
        index = faiss.IndexFlat(d, metric)
        index.add(xb)
        index = faiss.index_cpu_to_all_gpus(index)
        D, I = index.search(xq, k=k)
    nq = len(xq)

    if metric == faiss.METRIC_L2:
        # use negated distances as scores
        D = -D

    predictions = [
        PredictedMatch(query_image_ids[i], db_image_ids[I[i, j]], D[i, j])
        for i in range(nq)
        for j in range(k)
    ]
    return predictions
