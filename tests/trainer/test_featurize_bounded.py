"""Featurising in chunks (a fast tokenizer: each row once, over-long rows read from the
truncation's overflow; others: truncated at max_seq_len + 1, the over-long rows again at the
limit) gives the same token ids, type ids and over-long counts as tokenizing every row whole
and cutting the over-long ones (the former way, restated here), for pairs and single texts,
dropping and truncating."""

from __future__ import annotations

import random

import pytest

from weightsearch.core.errors import DataError
from weightsearch.trainer.encoders import load_tokenizer
from weightsearch.trainer.heads.base import encode_counted


def _whole_then_cut(tokenizer, text_a, text_b, max_len, drop):
    """Every row tokenized untruncated; the over-long ones re-tokenized at max_len (pairs:
    longest first) or left out."""
    full = tokenizer(text_a, text_b, return_token_type_ids=True)
    ids, types = list(full["input_ids"]), list(full["token_type_ids"])
    over = [i for i, row in enumerate(ids) if len(row) > max_len]
    if drop:
        keep = [i for i in range(len(ids)) if i not in set(over)]
        return [ids[i] for i in keep], [types[i] for i in keep], over
    for i in over:
        cut = tokenizer(text_a[i], None if text_b is None else text_b[i], truncation=True,
                        max_length=max_len, return_token_type_ids=True)
        ids[i], types[i] = cut["input_ids"], cut["token_type_ids"]
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
