"""Featurising in chunks (a fast tokenizer: each row once, over-long rows read from the
truncation's overflow, long texts cut past what truncation keeps; others: truncated at
max_seq_len + 1, the over-long rows again at the limit) gives the same token ids, type ids and
over-long counts as tokenizing every row whole and cutting the over-long ones (the former way,
restated here), for pairs and single texts, dropping and truncating."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import pre_tokenizers

from weightsearch.core.errors import DataError
from weightsearch.trainer.encoders import load_tokenizer
from weightsearch.trainer.heads.token_limit import encode_counted, prefix_words


def _whole_then_cut(tokenizer, text_a, text_b, max_len, drop):
    """Every row tokenized untruncated; the over-long ones re-tokenized at max_len (pairs:
    longest first) or left out."""
    full = tokenizer(text_a, text_b, return_token_type_ids=True)
    ids, types = list(full["input_ids"]), list(full["token_type_ids"])
    over = [i for i, row in enumerate(ids) if len(row) > max_len]
    if drop:
        keep = [i for i in range(len(ids)) if i not in set(over)]
        return [ids[i] for i in keep], [types[i] for i in keep], over
    if over:  # one batched call, as the trainer made it (a lone call reads "" as no pair)
        cut = tokenizer([text_a[i] for i in over],
                        None if text_b is None else [text_b[i] for i in over], truncation=True,
                        max_length=max_len, return_token_type_ids=True)
        for j, i in enumerate(over):
            ids[i], types[i] = cut["input_ids"][j], cut["token_type_ids"][j]
    return ids, types, over


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["the", "cat", "sat", "unbelievably", "on", "a", "mat", "tokenization", "of", "x"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) for _ in range(n)]


@pytest.mark.parametrize("pairs", [True, False])
@pytest.mark.parametrize("drop", [True, False])
def test_chunked_featurising_matches_tokenizing_whole(minilm_path, pairs, drop):
    tokenizer = load_tokenizer(minilm_path)
    text_a, text_b = _texts(50, 1), (_texts(50, 2) if pairs else None)
    for max_len in (16, 33, 60):  # some rows land exactly on max_len + 1
        got = encode_counted(tokenizer, text_a, text_b, max_len, "t", drop=drop, chunk=7)
        assert got == _whole_then_cut(tokenizer, text_a, text_b, max_len, drop), max_len
        assert 0 < len(got[2]) < 50


def test_dropping_every_row_is_refused_across_chunks(minilm_path):
    tokenizer = load_tokenizer(minilm_path)
    with pytest.raises(DataError, match="every example is longer"):
        encode_counted(tokenizer, ["a b c d e f g h i j"] * 9, None, 8, "t", drop=True, chunk=4)


class _WithoutBackend:
    """The same tokenizer, seen as one without a fast backend (a slow tokenizer's interface)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)


@pytest.mark.parametrize("pairs", [True, False])
def test_a_tokenizer_without_a_fast_backend_gives_the_same_rows(minilm_path, pairs):
    tokenizer = load_tokenizer(minilm_path)
    text_a, text_b = _texts(40, 3), (_texts(40, 4) if pairs else None)
    for drop in (True, False):
        fast = encode_counted(tokenizer, text_a, text_b, 20, "t", drop=drop, chunk=9)
        slow = encode_counted(_WithoutBackend(tokenizer), text_a, text_b, 20, "t", drop=drop,
                              chunk=9)
        assert fast == slow == _whole_then_cut(tokenizer, text_a, text_b, 20, drop)


@pytest.mark.parametrize("wrap", [False, True])
def test_a_limit_below_the_special_tokens_is_one_clear_error(minilm_path, wrap):
    tokenizer = load_tokenizer(minilm_path)
    if wrap:
        tokenizer = _WithoutBackend(tokenizer)
    with pytest.raises(DataError, match="cannot truncate to max_seq_len=2"):
        encode_counted(tokenizer, ["a b c d e"] * 3, ["f g h i j"] * 3, 2, "t")


# Pieces that test a cut at a space: accents and combining marks (normalised away or into
# their letter), characters that vanish (control, zero-width), other whitespace, CJK (split
# per character), punctuation, a final sigma, added tokens written in the text, long words.
_PIECES = ["the", "cat", "tokenization", "unbelievably", "naïve", "e\u0301", "\u0301",
           "\x1c", "\x00", "\u200b", "\u3000", "\xa0", "中文", "ΟΔΟΣ", "don't", "a.b", "[SEP]",
           "[MASK]", "x" * 120, ""]
_GLUE = [" ", " ", " ", "  ", "\t", "\n", "\x1c", ""]


@st.composite
def _text(draw, most: int) -> str:
    pieces = draw(st.lists(st.sampled_from(_PIECES), max_size=most))
    glue = draw(st.lists(st.sampled_from(_GLUE), min_size=len(pieces), max_size=len(pieces)))
    return "".join(p + g for p, g in zip(pieces, glue, strict=True))


@pytest.fixture(scope="module")
def minilm_tokenizer(minilm_path):
    return load_tokenizer(minilm_path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_text(40), _text(40), st.booleans()), min_size=1, max_size=12),
       max_len=st.sampled_from([8, 11, 16]), pairs=st.booleans(), drop=st.booleans())
def test_cutting_long_texts_keeps_the_tokens_of_the_whole_text(minilm_tokenizer, rows, max_len,
                                                               pairs, drop):
    """Hostile texts, some long on one side, some on both: the same rows as tokenizing whole."""
    text_a = [a if long_a else a[:20] for a, _, long_a in rows]
    text_b = [b for _, b, _ in rows] if pairs else None
    expected = _whole_then_cut(minilm_tokenizer, text_a, text_b, max_len, drop)
    if drop and len(expected[2]) == len(rows):
        with pytest.raises(DataError, match="every example is longer"):
            encode_counted(minilm_tokenizer, text_a, text_b, max_len, "t", drop=drop, chunk=5)
        return
    got = encode_counted(minilm_tokenizer, text_a, text_b, max_len, "t", drop=drop, chunk=5)
    assert got == expected, (text_a, text_b, max_len)


def test_long_texts_are_cut_before_tokenizing(minilm_tokenizer, monkeypatch):
    """A 5,000-word text is tokenized only up to its first max_len + 1 words: the tokenizer
    sees short inputs (the time of a long-document task follows max_seq_len)."""
    from weightsearch.trainer.heads import token_limit

    seen: list[int] = []
    real = token_limit._encode_batch

    def recording(backend, rows, max_len, where, *rest):
        seen.extend(len(r if isinstance(r, str) else r[0] + r[1]) for r in rows)
        return real(backend, rows, max_len, where, *rest)

    monkeypatch.setattr(token_limit, "_encode_batch", recording)
    document = " ".join(["evidence"] * 5000)
    ids, _, over = encode_counted(minilm_tokenizer, [document, "a question?"], None, 16, "t")
    assert over == [0] and max(seen) < 20 * len("evidence ")
    pair = encode_counted(minilm_tokenizer, ["is it true?"], [document], 16, "t")
    assert max(seen) < 20 * len("evidence ") + len("is it true?")
    assert pair == _whole_then_cut(minilm_tokenizer, ["is it true?"], [document], 16, False)
    assert ids == _whole_then_cut(minilm_tokenizer, [document, "a question?"], None, 16,
                                  False)[0]


def test_only_tokenizers_that_split_at_spaces_are_cut(minilm_tokenizer):
    backend = copy.deepcopy(minilm_tokenizer.backend_tokenizer)
    backend.enable_truncation(16)
    assert prefix_words(backend, 16) == 17
    backend.enable_truncation(16, direction="left")
    assert prefix_words(backend, 16) is None  # a cut would drop the tokens kept
    backend.enable_truncation(16)
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    assert prefix_words(backend, 16) is None
    spaced = copy.deepcopy(minilm_tokenizer.backend_tokenizer)
    spaced.enable_truncation(16)
    spaced.add_tokens(["new york"])
    assert prefix_words(spaced, 16) is None


def test_a_tokenizer_that_splits_special_tokens_in_text_keeps_doing_so(minilm_path):
    """`split_special_tokens` (from a tokenizer_config.json) is a flag of the live tokenizer
    that a copy of its backend does not carry: "[SEP]" typed in a text stays five tokens."""
    from transformers import AutoTokenizer

    from weightsearch.trainer.encoders import resolve_encoder

    tokenizer = AutoTokenizer.from_pretrained(resolve_encoder(minilm_path),
                                              split_special_tokens=True, local_files_only=True)
    text_a = ["[CLS] a", "x [SEP] y " * 6]
    got = encode_counted(tokenizer, text_a, None, 8, "t")
    assert got == _whole_then_cut(tokenizer, text_a, None, 8, False)
    assert tokenizer.sep_token_id not in got[0][0][1:-1]


def test_text_the_tokenizer_cannot_read_is_one_clear_error(minilm_tokenizer):
    with pytest.raises(DataError, match=r"the tokenizer cannot read a row .*check the file's text"):
        encode_counted(minilm_tokenizer, ["a \ud800 b"], None, 8, "t")


def test_a_pair_long_on_both_sides_is_cut_on_both_sides(minilm_tokenizer, monkeypatch):
    """Two 128-word sides at max_seq_len 128 (each shorter than the limit, the pair far over
    it): each side is tokenized only up to about half the budget, with the same ids as the
    whole pair, whichever side is longer (one more word on either side) or in a tie."""
    from weightsearch.trainer.heads import token_limit

    seen: list[int] = []
    real = token_limit._encode_batch

    def recording(backend, rows, max_len, where, *rest):
        seen.extend(len(r[0].split(" ")) + len(r[1].split(" ")) for r in rows)
        return real(backend, rows, max_len, where, *rest)

    monkeypatch.setattr(token_limit, "_encode_batch", recording)
    words = ["the", "cat", "sat", "on", "a", "mat"]
    side = lambda n, k: " ".join(words[(i + k) % 6] for i in range(n))  # noqa: E731
    text_a = [side(128, 0), side(129, 1), side(128, 2), side(300, 3)]
    text_b = [side(128, 4), side(128, 5), side(129, 0), side(128, 1)]
    got = encode_counted(minilm_tokenizer, text_a, text_b, 128, "t")
    assert got == _whole_then_cut(minilm_tokenizer, text_a, text_b, 128, False)
    assert max(seen) <= 2 * 64 + 1  # about half the budget of 125 tokens a side
    kept_a = [row.index(minilm_tokenizer.sep_token_id) - 1 for row in got[0]]
    assert kept_a == [62, 63, 62, 63]  # the shorter side (the first in a tie) keeps 125 // 2


def test_chunk_counts_stay_bounded_and_exact_past_their_limit(minilm_tokenizer, monkeypatch):
    """Past its limit the count cache starts afresh (keeping the chunks in hand): memory stays
    bounded and the rows stay those of the whole texts."""
    from weightsearch.trainer.heads import token_limit

    monkeypatch.setattr(token_limit.ChunkCounts, "LIMIT", 50)
    rng = random.Random(7)
    letters = "abcdefghij"
    word = lambda: "".join(rng.choice(letters) for _ in range(rng.randint(1, 6)))  # noqa: E731
    text_a = [" ".join(word() for _ in range(40)) for _ in range(30)]
    text_b = [" ".join(word() for _ in range(40)) for _ in range(30)]
    sizes: list[int] = []
    learn = token_limit.ChunkCounts.learn

    def spying(self, texts, where):
        learn(self, texts, where)
        sizes.append(len(self.known))

    monkeypatch.setattr(token_limit.ChunkCounts, "learn", spying)
    got = encode_counted(minilm_tokenizer, text_a, text_b, 24, "t", chunk=2)
    assert got == _whole_then_cut(minilm_tokenizer, text_a, text_b, 24, False)
    assert len(sizes) == 15 and max(sizes) <= 50 + 2 * 2 * 40  # the limit plus one chunk's rows


def test_a_side_longer_than_the_counted_head_is_decided_by_its_head_or_counted_whole(
        minilm_tokenizer, monkeypatch):
    """Each side is counted ahead only up to HEAD_WORDS x (max_seq_len + 1) chunks: a longer
    side whose counted head already outnumbers the other side whole is cut at once; where that
    cannot tell (both sides past their heads) both whole sides are counted, one row at a time,
    and the pair is cut too. Either way, the whole pair's ids."""
    from weightsearch.trainer.heads import token_limit

    monkeypatch.setattr(token_limit, "HEAD_WORDS", 1)
    cuts: list[bool] = []
    real = token_limit._cut_long_pair

    def recording(*args):
        cut = real(*args)
        cuts.append(cut is not None)
        return cut

    monkeypatch.setattr(token_limit, "_cut_long_pair", recording)
    totals: list[int] = []
    total = token_limit.ChunkCounts.total
    monkeypatch.setattr(token_limit.ChunkCounts, "total",
                        lambda self, chunks, where: totals.append(len(chunks))
                        or total(self, chunks, where))
    side = lambda n: " ".join(["cat", "tokenization", "on"][i % 3] for i in range(n))  # noqa: E731
    text_a = [side(20), side(60), side(60), side(10), side(300)]
    text_b = [side(200), side(200), side(61), side(200), side(299)]
    got = encode_counted(minilm_tokenizer, text_a, text_b, 24, "t")
    assert got == _whole_then_cut(minilm_tokenizer, text_a, text_b, 24, False)
    # heads of 25 chunks: a 20-word side is whole, 60-word ones are not (the 10-word side is
    # short: the one-long-side rule)
    assert cuts == [True, True, True, True]
    assert totals == [60, 200, 60, 61, 300, 299]


def test_the_tokenizer_gets_a_bounded_amount_of_text_a_call(minilm_tokenizer, monkeypatch):
    """Rows tokenized whole (both sides of a pair long past what is counted) go to the
    tokenizer a few characters' worth at a time (ENCODE_CHARS; a row longer than that alone),
    and only their ids are kept: the same rows as tokenizing whole."""
    from weightsearch.trainer.heads import token_limit

    monkeypatch.setattr(token_limit, "ENCODE_CHARS", 300)
    calls: list[int] = []
    real = token_limit._encode_rows

    def recording(backend, rows, max_len, where):
        calls.append(sum(len(r) if isinstance(r, str) else len(r[0]) + len(r[1]) for r in rows))
        return real(backend, rows, max_len, where)

    monkeypatch.setattr(token_limit, "_encode_rows", recording)
    text_a = _texts(30, 5)
    text_b = [" ".join(["evidence"] * 80), *_texts(29, 6)]
    got = encode_counted(minilm_tokenizer, text_a, text_b, 16, "t", chunk=512)
    assert got == _whole_then_cut(minilm_tokenizer, text_a, text_b, 16, False)
    assert len(calls) > 3 and all(c < 300 + 720 for c in calls)  # one row may pass the mark
