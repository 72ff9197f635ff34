"""``vsbench.io.ids.IdColumn``: the compact id columns the copy-detection readers build give the ids
as written, each distinct id once, sorted in code point order, with codes that order as the ids do,
whatever the chunking: chunks that repeat ids and chunks that do not, ids longer than the segment
the text is moved by, empty ids, non-ASCII text, and columns of no row at all."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vsbench.io import ids
from vsbench.io.ids import IdColumn, Ids


def column(texts: list[str]) -> Ids:
    built = IdColumn()
    for text in texts:
        built.append(text)
    return built.finish()


def check(texts: list[str], result: Ids) -> None:
    """The column reads back as ``texts``; its values are the distinct ids in code point order; its
    codes order as the ids do (what the scorers rely on)."""
    assert result.tolist() == texts
    assert result.values.to_pylist() == sorted(set(texts))
    codes = np.asarray(result.codes)
    assert codes.dtype == np.int32 and codes.size == len(texts)
    for (a, code_a), (b, code_b) in zip(zip(texts, codes.tolist()), zip(texts[1:], codes[1:].tolist())):
        assert (a < b) == (code_a < code_b) and (a == b) == (code_a == code_b)


def use_small_steps(patch: pytest.MonkeyPatch) -> None:
    """Chunks, blocks and text segments of a few items, so that a short column crosses every boundary."""
    patch.setattr(ids, "CHUNK_ROWS", 5)
    patch.setattr(ids, "BLOCK", 3)
    patch.setattr(ids, "SEGMENT_BYTES", 7)


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    use_small_steps(monkeypatch)


AN_ID = st.one_of(st.sampled_from(["", "a", "b", "Q1", "Q1\x00", "é", "中", "\x00", "🙂", " ", "R10"]), st.text(max_size=4))


@settings(max_examples=200, deadline=None)
@given(st.lists(AN_ID, max_size=40))
def test_any_column_reads_back_as_written_with_sorted_distinct_values(texts: list[str]) -> None:
    with pytest.MonkeyPatch.context() as patch:  # (a function-scoped fixture would span all of hypothesis' examples)
        use_small_steps(patch)
        check(texts, column(texts))


@pytest.mark.usefixtures("small_steps")
def test_chunks_that_repeat_ids_and_chunks_that_do_not_share_one_numbering() -> None:
    texts = ["Q3", "Q1", "Q2", "Q5", "Q4",  # a chunk of distinct ids (no row numbers kept)
             "R1", "", "R1", "", "Q1",  # a chunk repeating ids, and one of the first chunk's
             "Q9", "Q8"]  # a last, short chunk
    check(texts, column(texts))


def test_no_row_and_only_empty_ids() -> None:
    empty = column([])
    assert len(empty) == 0 and empty.tolist() == [] and len(empty.values) == 0
    check([""] * 10, column([""] * 10))


def test_ids_longer_than_a_text_segment_and_a_memory_page_are_moved_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "SEGMENT_BYTES", 1000)
    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(list("abcé中"), size=int(length))) for length in rng.integers(0, 9000, size=60)]
    texts += texts[:7]  # repeated long ids
    check(texts, column(texts))


def test_a_column_of_many_chunks_matches_numpy_unique() -> None:
    rng = np.random.default_rng(1)
    texts = [f"Q{n:05d}" for n in rng.integers(0, 30_000, size=50_000)]  # over 6 chunks, many repeats
    result = column(texts)
    values, codes = np.unique(np.array(texts), return_inverse=True)
    assert result.values.to_pylist() == values.tolist()
    assert np.array_equal(result.codes, codes)
