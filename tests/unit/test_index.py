"""vsbench.index: hand-computed neighbours, scores and SSCD score normalization; brute force agreement;
PCAW codecs checked against a numpy PCA; input errors; the GPU path's fallbacks (simulated: no GPU here)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import faiss
import numpy as np
import pytest

from vsbench.index import codec as codec_module
from vsbench.index import search as search_module
from vsbench.index.codec import GPU_MAX_K
from vsbench.index.plan import search_all
from vsbench.index.search import Candidates, search
from vsbench.index.settings import ScoreNorm, SearchError, parse_codecs, parse_score_norm, parse_score_norms

# Two queries and three references, small enough to check every score by hand.
Q = np.array([[1.0, 0.0], [0.0, 1.0]])
R = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 2.0]])
# Training set for score normalization: q0 . T = [1, 0, 0.5], q1 . T = [0, 3, 0.5].
T = np.array([[1.0, 0.0], [0.0, 3.0], [0.5, 0.5]])


def rows(c: Candidates) -> list[tuple[int, int, float]]:
    columns = zip(c.query, c.reference, c.score, strict=True)
    return [(int(q), int(r), round(float(s), 5)) for q, r, s in columns]


def test_inner_product_by_hand_with_k_above_the_reference_count() -> None:
    # q0 . R = [1, 0.5, 0], q1 . R = [0, 0.5, 2]; k = 10 is capped at the 3 references.
    c = search(Q, R, k=10)
    assert rows(c) == [(0, 0, 1.0), (0, 1, 0.5), (0, 2, 0.0), (1, 2, 2.0), (1, 1, 0.5), (1, 0, 0.0)]
    assert c.query.dtype == c.reference.dtype == np.int64
    assert c.score.dtype == np.float32


def test_l2_scores_are_negative_squared_distances() -> None:
    # q0: |q0-r|^2 = [0, 0.5, 5]; q1: [2, 0.5, 1].
    c = search(Q, R, k=2, metric="l2")
    assert rows(c) == [(0, 0, 0.0), (0, 1, -0.5), (1, 1, -0.5), (1, 2, -1.0)]


def test_global_cap_keeps_the_best_overall_and_breaks_ties_by_query() -> None:
    # All six scores: 2 (q1 r2), 1 (q0 r0), then a 0.5 tie (q0 r1, q1 r1): the lower query wins.
    c = search(Q, R, k=3, global_cap=3)
    assert rows(c) == [(0, 0, 1.0), (0, 1, 0.5), (1, 2, 2.0)]
    assert len(search(Q, R, k=3, global_cap=100)) == 6


def test_score_norm_subtracts_the_mean_training_similarity_from_each_query() -> None:
    # beta 1 [0,1]: q0's two best training similarities are 1 and 0.5 (mean 0.75), q1's 3 and 0.5
    # (mean 1.75). Only the queries are adjusted: every reference keeps its own score minus that.
    c = search(Q, R, k=3, train=T, score_norm=ScoreNorm(1.0, 0, 1))
    assert rows(c) == [(0, 0, 0.25), (0, 1, -0.25), (0, 2, -0.75), (1, 2, 0.25), (1, 1, -1.25), (1, 0, -1.75)]
    # beta 2 [1,2]: q0's sorted similarities [1, 0.5, 0] -> ranks 1..2 mean 0.25, x2 = 0.5;
    # q1's [3, 0.5, 0] -> 0.25, x2 = 0.5.
    c = search(Q, R, k=1, train=T, score_norm=ScoreNorm(2.0, 1, 2))
    assert rows(c) == [(0, 0, 0.5), (1, 2, 1.5)]


def test_score_norm_matches_sscds_augmented_inner_product() -> None:
    # sscd/disc_eval.py apply_score_norm: append -beta * mean(training similarities first..last) to
    # each query and 1 to each reference, then search by inner product.
    rng = np.random.default_rng(6)
    queries, refs, train = (rng.standard_normal((n, 12)) for n in (30, 200, 100))
    beta, first, last = 1.5, 1, 3
    training = -np.sort(-(queries @ train.T), axis=1)
    adjustment = -beta * training[:, first:last + 1].mean(axis=1, keepdims=True)
    augmented = np.hstack([queries, adjustment]) @ np.hstack([refs, np.ones((200, 1))]).T
    expected = np.argsort(-augmented, axis=1)[:, :5]
    c = search(queries, refs, k=5, train=train, score_norm=ScoreNorm(beta, first, last))
    np.testing.assert_array_equal(c.reference.reshape(30, 5), expected)
    np.testing.assert_allclose(c.score.reshape(30, 5), np.take_along_axis(augmented, expected, 1), atol=1e-4)


def test_global_cap_applies_after_normalization() -> None:
    # Unnormalized, q1 r2 (2.0) is the best pair; normalized (beta 1 [0,1]) q0 r0 and q1 r2 tie at 0.25
    # and the tie keeps the lower query.
    assert rows(search(Q, R, k=3, global_cap=1)) == [(1, 2, 2.0)]
    assert rows(search(Q, R, k=3, global_cap=1, train=T, score_norm=ScoreNorm(1.0, 0, 1))) == [(0, 0, 0.25)]


def test_score_norm_with_l2_uses_negative_distances_as_similarities() -> None:
    # |q0 - T|^2 = [0, 10, 0.5] -> best similarities 0, -0.5 (mean -0.25); |q1 - T|^2 = [2, 4, 0.5] ->
    # -0.5, -2 (mean -1.25). Scores: q0 r0 0 + 0.25; q1 r1 -0.5 + 1.25.
    c = search(Q, R, k=1, train=T, score_norm=ScoreNorm(1.0, 0, 1), metric="l2")
    assert rows(c) == [(0, 0, 0.25), (1, 1, 0.75)]


def test_flat_agrees_with_brute_force_numpy() -> None:
    rng = np.random.default_rng(0)
    queries, refs = rng.standard_normal((40, 16)), rng.standard_normal((300, 16))
    c = search(queries, refs, k=10)
    similarity = queries @ refs.T
    expected = np.argsort(-similarity, axis=1)[:, :10]
    np.testing.assert_array_equal(c.query, np.repeat(np.arange(40), 10))
    np.testing.assert_array_equal(c.reference.reshape(40, 10), expected)
    expected_scores = np.take_along_axis(similarity, expected, 1)
    np.testing.assert_allclose(c.score.reshape(40, 10), expected_scores, atol=1e-5)

    c = search(queries, refs, k=5, metric="l2")
    distance = ((queries[:, None, :] - refs[None, :, :]) ** 2).sum(-1)
    expected = np.argsort(distance, axis=1)[:, :5]
    np.testing.assert_array_equal(c.reference.reshape(40, 5), expected)
    np.testing.assert_allclose(c.score.reshape(40, 5), -np.take_along_axis(distance, expected, 1), atol=1e-4)


def _numpy_pcaw_l2norm(train: np.ndarray, x: np.ndarray, dims: int) -> np.ndarray:
    """PCA whitening to ``dims`` then L2 normalization, the textbook way (faiss's PCAW, L2norm)."""
    mean = train.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(train - mean, rowvar=False))
    top = np.argsort(values)[::-1][:dims]
    projected = (x - mean) @ vectors[:, top] / np.sqrt(values[top])
    return projected / np.linalg.norm(projected, axis=1, keepdims=True)


def test_pcaw_codec_is_trained_on_the_training_set_and_gives_cosines() -> None:
    rng = np.random.default_rng(1)
    train = rng.standard_normal((200, 6)) * np.array([5, 3, 1, 1, 0.5, 0.1])
    refs, queries = rng.standard_normal((30, 6)), rng.standard_normal((8, 6))
    queries[0] = refs[7]
    codec = "PCAW2,L2norm,Flat"
    c = search(queries, refs, codec=codec, train=train, k=30)
    flat = search(queries, refs, k=30)
    assert not np.allclose(np.sort(c.score), np.sort(flat.score))
    # Scores are cosines of the projected rows: within [-1, 1], 1 for a query equal to a reference.
    assert np.all(np.abs(c.score) <= 1 + 1e-5)
    assert (c.reference[0], c.score[0]) == (7, pytest.approx(1.0, abs=1e-5))
    pq, pr = _numpy_pcaw_l2norm(train, queries, 2), _numpy_pcaw_l2norm(train, refs, 2)
    expected = (pq @ pr.T)[c.query, c.reference]
    np.testing.assert_allclose(c.score, expected, atol=1e-4)


CHAINS = ["PCAW3,L2norm,Flat", "L2norm,PCAW3,Flat", "PCA4,L2norm,Flat", "L2norm,Flat"]


@pytest.mark.parametrize("codec", CHAINS)
def test_codec_chains_agree_with_the_plain_faiss_index(codec: str) -> None:
    # vsbench trains and applies the transforms itself (to check each projection); FAISS's own
    # IndexPreTransform must give the same neighbours and scores.
    rng = np.random.default_rng(7)
    queries, refs, train = (rng.standard_normal((n, 6)).astype(np.float32) for n in (10, 50, 100))
    index = faiss.index_factory(6, codec, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        index.train(train)
    index.add(refs)
    distances, ids = index.search(queries, 5)
    c = search(queries, refs, codec=codec, train=train, k=5)
    np.testing.assert_array_equal(c.reference.reshape(10, 5), ids)
    np.testing.assert_allclose(c.score.reshape(10, 5), distances, atol=1e-5)


def test_codecs_that_need_training_say_so() -> None:
    with pytest.raises(SearchError, match=r"'PCAW2,L2norm,Flat' must be trained.*train="):
        search(Q, R, codec="PCAW2,L2norm,Flat")
    with pytest.raises(SearchError, match=r"'PCAW2,L2norm,Flat' needs at least 3 training rows \(whitened"):
        search(Q, R, codec="PCAW2,L2norm,Flat", train=T[:2])
    with pytest.raises(SearchError, match=r"'PCA2,Flat' needs at least 2 training rows \(PCA to 2 dims\)"):
        search(Q, R, codec="PCA2,Flat", train=T[:1])
    assert len(search(Q, R, codec="PCA2,Flat", train=T[:2])) == 6  # plain PCA: as many rows as dims will do
    with pytest.raises(SearchError, match=r"'PCA4,Flat': PCA cannot output 4 dims from 2"):
        search(Q, R, codec="PCA4,Flat", train=T)
    with pytest.raises(SearchError, match=r"'IVF8,Flat' could not be trained on 3 training rows.*clusters"):
        search(Q, R, codec="IVF8,Flat", train=T)
    with pytest.raises(SearchError, match=r"codec 'Flatt' is not a FAISS index_factory string"):
        search(Q, R, codec="Flatt")


def test_approximate_codecs_drop_missing_results() -> None:
    # IVF with nprobe 1 sees one list: queries get fewer than k results (FAISS's -1 slots).
    rng = np.random.default_rng(2)
    refs, train = rng.standard_normal((60, 4)), rng.standard_normal((400, 4))
    c = search(rng.standard_normal((10, 4)), refs, codec="IVF8,Flat", train=train, k=60)
    assert 0 < len(c) < 600
    assert c.reference.min() >= 0


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"references": np.array([[1.0, 0.0], [np.nan, 0.0]])}, r"references: row 1 has NaN"),
        ({"queries": np.array([[1.0, 0.0], [0.0, np.inf]])}, r"queries: row 1 has NaN or infinite"),
        ({"train": np.array([[1.0, 0.0], [1.0, 1.0], [3e38 * 10, 0]])}, r"train: row 2 has NaN or infinite"),
        ({"references": np.ones((3, 3))}, r"references have 3 dims but queries have 2"),
        ({"train": np.ones((3, 5))}, r"train have 5 dims but queries have 2"),
        ({"queries": np.ones((0, 2))}, r"queries is empty"),
        ({"references": np.ones((3, 0))}, r"references is empty"),
        ({"queries": np.ones(2)}, r"queries must be a 2-D array"),
        ({"references": np.ones((3, 2), dtype=np.int64)}, r"references must hold floating-point values"),
    ],
)
def test_bad_arrays_are_named(arrays: dict[str, np.ndarray], message: str) -> None:
    kwargs = {"queries": Q, "references": R, "train": T, **arrays}
    with pytest.raises(SearchError, match=message):
        search(kwargs.pop("queries"), kwargs.pop("references"), **kwargs)


def test_the_first_bad_row_is_found_beyond_the_first_block() -> None:
    refs = np.zeros((70_000, 2), dtype=np.float32)
    refs[[65_540, 69_000], 1] = np.nan
    with pytest.raises(SearchError, match=r"references: row 65540 has NaN"):
        search(Q, refs)


def test_bad_settings() -> None:
    with pytest.raises(SearchError, match="k must be a positive integer"):
        search(Q, R, k=0)
    with pytest.raises(SearchError, match="global_cap must be a positive integer"):
        search(Q, R, global_cap=0)
    with pytest.raises(SearchError, match="metric must be one of"):
        search(Q, R, metric="cosine")  # type: ignore[arg-type]
    with pytest.raises(SearchError, match=r"score normalization 1.00\[0,2\] needs training descriptors"):
        search(Q, R, score_norm=ScoreNorm(1.0, 0, 2))
    with pytest.raises(SearchError, match=r"needs at least 4 training rows, got 3"):
        search(Q, R, train=T, score_norm=ScoreNorm(1.0, 0, 3))


def test_parse_score_norm() -> None:
    assert parse_score_norm("1.00[0,2]") == ScoreNorm(1.0, 0, 2)
    assert parse_score_norm(" 0.5[ 1 , 3 ] ") == ScoreNorm(0.5, 1, 3)
    assert parse_score_norm("2[4]") == ScoreNorm(2.0, 4, 4)  # SSCD: beta[i] is beta[i,i]
    assert parse_score_norm("") is None
    assert parse_score_norm("None") is None
    # SSCD's label: f"{weight:.2f}[{start},{end}]".
    for text, label in [("1.00[0,2]", "1.00[0,2]"), ("1.234[0,2]", "1.23[0,2]"), ("0.125[0,0]", "0.12[0,0]"),
                        ("-1[2,5]", "-1.00[2,5]"), ("1e0[-1,2]", "1.00[-1,2]")]:
        assert str(parse_score_norm(text)) == label
    bad_texts = ["1.0", "[0,2]", "1.0[0,2", "x[0,2]", "1.0[0,2,3]", "inf[0,1]", "1e999[0,1]"]
    for bad in bad_texts:
        message = rf"score normalization '{re.escape(bad)}': .*"
        with pytest.raises(ValueError, match=message):
            parse_score_norm(bad)
    with pytest.raises(ValueError, match=r"selects no neighbour rank .* did you mean \[0,2\]"):
        parse_score_norm("1.0[2,0]")  # SSCD averages an empty slice: every score NaN


def test_negative_first_rank_slices_as_sscd_does() -> None:
    # SSCD: D[:, -1:3] of the 3 best training similarities is the third one alone.
    norm = parse_score_norm("1.0[-1,2]")
    assert norm is not None and list(norm.ranks) == [2]
    assert norm.note is not None and "did you mean [0,2]" in norm.note and "1.00[2,2]" in norm.note
    a = search(Q, R, k=3, train=T, score_norm=norm)
    b = search(Q, R, k=3, train=T, score_norm=ScoreNorm(1.0, 2, 2))
    assert rows(a) == rows(b)
    assert ScoreNorm(1.0, 0, 2).note is None


def test_several_score_norms_each_give_rows() -> None:
    assert parse_score_norms("1.0[0,2];0.5[1,3]") == [ScoreNorm(1.0, 0, 2), ScoreNorm(0.5, 1, 3)]
    assert parse_score_norms("") == []
    with pytest.raises(ValueError, match="would label two rows alike"):
        parse_score_norms("1.234[0,2];1.231[0,2]")
    rng = np.random.default_rng(2)
    queries, refs, train = (rng.standard_normal((n, 6)) for n in (4, 12, 30))
    runs = search_all(queries, refs, codecs="Flat", score_norm="1.0[0,2];0.5[1,3]", train=train, k=3,
                      global_cap=None, metric="ip", use_gpu=None)
    assert [label for _, label, _ in runs] == ["none", "1.00[0,2]", "0.50[1,3]"]
    alone = search(queries, refs, k=3, train=train, score_norm=ScoreNorm(0.5, 1, 3))
    assert rows(runs[2][2]) == rows(alone)


def test_parse_codecs() -> None:
    text = "Flat;PCAW512,L2norm,Flat"
    assert parse_codecs(text) == ["Flat", "PCAW512,L2norm,Flat"]
    assert ";".join(parse_codecs(text)) == text
    assert parse_codecs(" Flat ; L2norm,Flat ") == ["Flat", "L2norm,Flat"]
    for bad in ["", "Flat;", "Flat;;PCA16,Flat", " ; "]:
        with pytest.raises(ValueError, match="separated by ';'"):
            parse_codecs(bad)
    with pytest.raises(ValueError, match=r"\['Flat'\] listed more than once"):
        parse_codecs("Flat;L2norm,Flat;Flat")


def test_search_all_reports_each_codec_without_and_with_normalization() -> None:
    rng = np.random.default_rng(3)
    queries, refs, train = (rng.standard_normal((n, 8)) for n in (6, 20, 50))
    settings = {"train": train, "k": 4, "global_cap": None, "metric": "ip", "use_gpu": None}
    runs = search_all(queries, refs, codecs="Flat;PCAW4,L2norm,Flat", score_norm="1.0[0,2]", **settings)
    assert [(codec, label) for codec, label, _ in runs] == [
        ("Flat", "none"), ("PCAW4,L2norm,Flat", "none"),
        ("Flat", "1.00[0,2]"), ("PCAW4,L2norm,Flat", "1.00[0,2]"),
    ]
    by_key = {(codec, label): c for codec, label, c in runs}
    for codec in ["Flat", "PCAW4,L2norm,Flat"]:
        plain, normed = by_key[codec, "none"], by_key[codec, "1.00[0,2]"]
        assert rows(plain) == rows(search(queries, refs, codec=codec, train=train, k=4))
        np.testing.assert_array_equal(plain.reference, normed.reference)
        shift = plain.score - normed.score  # one constant per query
        for q in range(6):
            assert np.ptp(shift[plain.query == q]) < 1e-5
    only = search_all(queries, refs, codecs="Flat", score_norm="", **settings)
    assert [(codec, label) for codec, label, _ in only] == [("Flat", "none")]


def test_use_gpu_true_without_gpu_support_falls_back_to_the_cpu(caplog: pytest.LogCaptureFixture) -> None:
    if faiss.get_num_gpus() > 0:
        pytest.skip("this faiss sees a GPU")
    search_module._said.clear()  # said once per process: this test wants to see it
    with caplog.at_level(logging.INFO, logger="vsbench.index.search"):
        c = search(Q, R, k=3, use_gpu=True)
    assert rows(c) == rows(search(Q, R, k=3, use_gpu=False))
    assert "no GPU support" in caplog.text
    assert "IndexFlat on the CPU" in caplog.text


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A faiss that claims one GPU and 'moves' indexes by returning them: records what it was given
    (and which resources: one object per process)."""
    moved: list[str] = []
    resources_seen: set[int] = set()

    def to_gpu(resources: object, device: int, index: faiss.Index) -> faiss.Index:
        assert device == 0
        resources_seen.add(id(resources))
        assert len(resources_seen) == 1, "every index shares one StandardGpuResources"
        moved.append(type(index).__name__)
        if isinstance(index, faiss.IndexHNSW):
            message = "Error in clone_Index at GpuCloner.cpp:1: This index type is not implemented on GPU."
            raise RuntimeError(message)  # noqa: TRY004 - faiss raises RuntimeError
        return index

    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    monkeypatch.setattr(search_module, "gpu_kernels_fail", lambda: "")  # the kernels run (see the probe's tests)
    codec_module.gpu_resources.cache_clear()
    search_module._said.clear()
    yield moved
    codec_module.gpu_resources.cache_clear()  # no fake resources left for a later test


def test_gpu_path_moves_only_the_final_index(fake_gpu: list[str], caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(4)
    queries, refs, train = (rng.standard_normal((n, 8)) for n in (5, 20, 50))
    with caplog.at_level(logging.INFO, logger="vsbench.index.search"):
        c = search(queries, refs, codec="PCAW4,L2norm,Flat", train=train, k=3, use_gpu=None)
    assert fake_gpu == ["IndexFlat"]  # the transforms stay on the CPU
    assert "IndexFlat on GPU 0" in caplog.text
    assert rows(c) == rows(search(queries, refs, codec="PCAW4,L2norm,Flat", train=train, k=3, use_gpu=False))


def test_gpu_path_falls_back_for_unsupported_indexes_and_large_k(fake_gpu: list[str],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    refs = np.random.default_rng(5).standard_normal((GPU_MAX_K + 1, 2))
    with caplog.at_level(logging.INFO, logger="vsbench.index.search"):
        hnsw = search(Q, refs, codec="HNSW8", k=3, use_gpu=True)
        wide = search(Q, refs, k=GPU_MAX_K + 1, use_gpu=True)
    assert fake_gpu == ["IndexHNSWFlat"]
    assert "cannot hold IndexHNSWFlat (This index type is not implemented on GPU.)" in caplog.text
    assert "exceeds faiss-gpu's limit of 2048" in caplog.text
    assert len(hnsw) == 6 and len(wide) == 2 * (GPU_MAX_K + 1)


NO_KERNEL = "CUDA error 209 no kernel image is available for execution on the device"


def test_a_gpu_faiss_cannot_run_falls_back_to_the_cpu_with_one_warning(
        fake_gpu: list[str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """faiss-gpu sees a GPU whose architecture its kernels lack (faiss-gpu-cu12 1.14 on an H100):
    the default (use_gpu None) searches on the CPU, says so once, and answers as the CPU does."""
    monkeypatch.setattr(search_module, "gpu_kernels_fail", lambda: NO_KERNEL)
    rng = np.random.default_rng(6)
    queries, refs, train = (rng.standard_normal((n, 8)) for n in (5, 20, 50))
    with caplog.at_level(logging.INFO, logger="vsbench.index.search"):
        first = search(queries, refs, codec="PCAW4,L2norm,Flat", train=train, k=3, use_gpu=None)
        again = search(queries, refs, k=3, use_gpu=True)
    assert fake_gpu == []  # nothing moved to the GPU
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"faiss-gpu cannot run on GPU 0 ({NO_KERNEL}): searching on the CPU"]
    assert rows(first) == rows(search(queries, refs, codec="PCAW4,L2norm,Flat", train=train, k=3, use_gpu=False))
    assert rows(again) == rows(search(queries, refs, k=3, use_gpu=False))


def test_the_gpu_probe_names_why_the_kernels_do_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe runs a two-row search through index_cpu_to_gpu: a CUDA error becomes its reason,
    a right answer "" (here the 'GPU' index is the CPU one, so the probe's search really runs)."""
    def broken(resources: object, device: int, index: faiss.Index) -> faiss.Index:
        raise RuntimeError(f"Error in void faiss::gpu::runL2Norm at utils/DeviceUtils.cu:1: {NO_KERNEL}")

    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    for to_gpu, expected in ((broken, NO_KERNEL), (lambda resources, device, index: index, "")):
        monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
        codec_module.gpu_kernels_fail.cache_clear()
        codec_module.gpu_resources.cache_clear()
        assert codec_module.gpu_kernels_fail() == expected
    codec_module.gpu_kernels_fail.cache_clear()
    codec_module.gpu_resources.cache_clear()
