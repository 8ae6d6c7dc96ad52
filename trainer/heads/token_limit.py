"""Tokenizing text (pairs) to a token limit, in time and memory bounded by the limit.

`encode_counted` gives each row's token ids and type ids and the rows over the limit, cut to it
(pairs: longest first) or dropped. A fast tokenizer's backend tokenizes each row once, and a
long text is cut at a space past what truncation keeps before it is tokenized, so time follows
max_seq_len rather than the texts' length; each cut is checked against what the whole text
keeps (a pair long on both sides is cut where its sides' token counts say). Other tokenizers
truncate at the limit + 1 to tell the over-long rows apart, and tokenize those again.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from weightsearch.core.errors import DataError


def encode(tokenizer: Any, text_a: list[str], text_b: list[str] | None,
           max_length: int | None) -> dict[str, list[list[int]]]:
    """One fast-tokenizer call; max_length=None means no truncation."""
    return tokenizer(text_a, text_b, truncation=max_length is not None, max_length=max_length,
                     return_token_type_ids=True, return_attention_mask=False, verbose=False)


ENCODE_CHUNK = 512  # rows per tokenizer call: bounds the encodings held at once (a truncated
# encoding still holds its overflowing tokens, so each costs as much as the whole text)


def encode_counted(tokenizer: Any, text_a: list[str], text_b: list[str] | None, max_len: int,
                   where: Any, drop: bool = False, chunk: int = ENCODE_CHUNK
                   ) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Token ids and type ids of each pair, and the indices of the pairs over max_len: cut to it,
    or (drop) removed from the returned lists.

    Rows are tokenized `chunk` at a time, so memory grows with the chunk, not with the texts'
    length. A fast tokenizer tokenizes each row once, truncated at max_len (pairs: longest
    first), and a row is over-long exactly when the truncation left overflowing tokens. Other
    tokenizers truncate at max_len + 1, which tells the over-long rows apart (exactly those
    that reach max_len + 1 tokens), and tokenize those again at max_len."""
    backend = _truncating_backend(tokenizer, max_len, where)
    words = None if backend is None else prefix_words(backend, max_len)
    counts = None if words is None or text_b is None else ChunkCounts(backend)
    input_ids: list[list[int]] = []
    type_ids: list[list[int]] = []
    too_long: list[int] = []
    for start in range(0, len(text_a), chunk):
        part_a = text_a[start:start + chunk]
        part_b = None if text_b is None else text_b[start:start + chunk]
        if backend is not None:
            ids, types, over = _encode_chunk_once(backend, part_a, part_b, max_len, where, drop,
                                                  words, counts)
        else:
            ids, types, over = _encode_chunk(tokenizer, part_a, part_b, max_len, where, drop)
        input_ids += ids
        type_ids += types
        too_long += [start + i for i in over]
    if any(len(ids) > max_len for ids in input_ids):  # the tokenizer skipped the truncation
        raise DataError(f"{where}: cannot truncate to max_seq_len={max_len} (the tokenizer's "
                        "special tokens alone take that many); raise max_seq_len")
    if drop and too_long and len(too_long) == len(text_a):
        raise DataError(f"{where}: every example is longer than max_seq_len={max_len}, so "
                        "overlong: drop leaves none; raise max_seq_len or use "
                        "overlong: truncate")
    return input_ids, type_ids, too_long


def _truncating_backend(tokenizer: Any, max_len: int, where: Any) -> Any:
    """A copy of a fast tokenizer's backend that truncates at max_len as the tokenizer's own
    call does (longest first, from its truncation side, no padding), or None for a tokenizer
    without a backend. A copy: the tokenizer's own call resets its backend's truncation."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    special = getattr(backend, "encode_special_tokens", False)
    backend = copy.deepcopy(backend)
    backend.encode_special_tokens = special  # a runtime flag the copy does not carry
    try:
        backend.enable_truncation(max_len, strategy="longest_first",
                                  direction=getattr(tokenizer, "truncation_side", "right"))
    except Exception as err:  # e.g. a limit the backend cannot take
        raise DataError(f"{where}: cannot truncate to max_seq_len={max_len} ({err}); raise "
                        "max_seq_len") from err
    backend.no_padding()
    return backend


def prefix_words(backend: Any, max_len: int) -> int | None:
    """How many space-separated words of a long text are tokenized (the text is cut at the
    space after them), or None where a cut could change the tokens kept.

    A cut at a space keeps the first tokens of the whole text only where each word is
    normalised and split on its own: BERT's normaliser (per character) and pre-tokenizer
    (splits at every space), WordPiece (per word), no added token spanning a space, and
    truncation from the right. max_len + 1 words give at least max_len + 1 tokens, so the
    cut text is still over-long, except where words vanish in normalising (control
    characters): `_exact_after_cut` checks each row and the others are tokenized whole."""
    if backend.truncation is None or backend.truncation.get("direction", "right") != "right":
        return None
    parts = (backend.normalizer, backend.pre_tokenizer, backend.model)
    if [type(p).__name__ for p in parts] != ["BertNormalizer", "BertPreTokenizer", "WordPiece"]:
        return None
    added = backend.get_added_tokens_decoder().values()
    if any(not token.content or any(c.isspace() for c in token.content) for token in added):
        return None
    return max_len + 1


def _cut(text: str, words: int) -> str:
    """`text` up to the space after its first `words` words (it has more than that)."""
    return " ".join(text.split(" ", words)[:words])


def _encode_chunk_once(backend: Any, text_a: list[str], text_b: list[str] | None, max_len: int,
                       where: Any, drop: bool, words: int | None,
                       counts: ChunkCounts | None = None
                       ) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """encode_counted for one chunk, each row tokenized once at max_len (again whole where a
    cut fails its check): the rows whose truncation overflowed are the over-long ones (the
    indices are the chunk's own).

    With `words` (`prefix_words`), a long single text, or the one long side of a pair, is
    tokenized only up to the space after that many words, so time follows max_len rather
    than the text's length. A pair whose two sides are long is cut on both sides where its
    token counts (`counts`, `_cut_long_pair`) say where; a row whose cut might change its
    tokens (a side that lost words in normalising) is tokenized whole."""
    rows: list[Any] = list(text_a) if text_b is None else list(zip(text_a, text_b, strict=True))
    pair = text_b is not None
    budget = max_len - backend.num_special_tokens_to_add(pair)
    cut_side: dict[int, int] = {}  # row -> the side tokenized from a cut (0: a, 1: b)
    kept_a: dict[int, int] = {}  # a pair cut on both sides -> the tokens its first side keeps
    long_pairs: list[int] = []
    if words is not None:
        for i, row in enumerate(rows):
            if not pair:
                if row.count(" ") > words:
                    rows[i], cut_side[i] = _cut(row, words), 0
            elif counts is not None and min(row[0].count(" "), row[1].count(" ")) >= budget // 2:
                long_pairs.append(i)  # both sides may keep half the budget: counts decide
            else:
                _cut_one_long_side(rows, i, words, cut_side)
    if long_pairs:  # only made where there are words and counts
        assert words is not None and counts is not None
        head = HEAD_WORDS * words  # chunks of a side counted at most
        heads = {i: (rows[i][0].split(" ", head), rows[i][1].split(" ", head))
                 for i in long_pairs}
        counts.learn([side[:head] for i in long_pairs for side in heads[i]], where)
        for i in long_pairs:
            cut = _cut_long_pair(rows[i], heads[i], head, counts, budget, where)
            if cut is not None:
                rows[i], kept_a[i] = cut
            else:  # a side with fewer tokens than its words suggested
                _cut_one_long_side(rows, i, words, cut_side)
    encodings = _encode_batch(backend, rows, max_len, where, cut_side.keys() | kept_a.keys())
    whole = [i for i, side in cut_side.items()
             if not _exact_after_cut(encodings[i], side, pair, budget)]
    whole += [i for i, first in kept_a.items() if not _keeps(encodings[i], first, budget)]
    if whole:
        redone = _encode_batch(
            backend, [text_a[i] if text_b is None else (text_a[i], text_b[i]) for i in whole],
            max_len, where)
        for i, encoding in zip(whole, redone, strict=True):
            encodings[i] = encoding
    too_long = [i for i, e in enumerate(encodings) if e.overflowing]
    skip = set(too_long) if drop else set()
    input_ids = [e.ids for i, e in enumerate(encodings) if i not in skip]
    type_ids = [e.type_ids for i, e in enumerate(encodings) if i not in skip]
    return input_ids, type_ids, too_long


def _cut_one_long_side(rows: list[Any], i: int, words: int, cut_side: dict[int, int]) -> None:
    """Pair `i` with its one long side cut after `words` words (`_exact_after_cut` checks it)."""
    a, b = rows[i]
    long_a, long_b = a.count(" ") > words, b.count(" ") > words
    if long_a != long_b:
        rows[i] = (_cut(a, words), b) if long_a else (a, _cut(b, words))
        cut_side[i] = 0 if long_a else 1


HEAD_WORDS = 4  # a side of a pair is counted up to HEAD_WORDS x (max_seq_len + 1) chunks
COUNT_BATCH = 16_384  # chunks per tokenizer call when counting (bounds the encodings held)


class ChunkCounts:
    """Token counts of space-separated chunks of text, each tokenized once (a bounded cache).

    Under `prefix_words`' conditions a space always ends a word and normalising works per
    character, so a text's token count (no special tokens) is the sum of its chunks' counts,
    empty chunks (runs of spaces) counting 0."""

    LIMIT = 200_000  # chunks remembered; past that the cache starts afresh (memory stays bounded)

    def __init__(self, backend: Any) -> None:
        self.backend = copy.deepcopy(backend)
        self.backend.encode_special_tokens = backend.encode_special_tokens
        self.backend.no_truncation()
        self.known: dict[str, int] = {"": 0}

    def learn(self, texts: list[list[str]], where: Any) -> None:
        """Count the chunks of `texts` (each a list of chunks) not counted yet."""
        chunks = {c for text in texts for c in text}
        new = list(chunks.difference(self.known))
        if len(self.known) + len(new) > self.LIMIT:  # forget all but these texts' chunks
            self.known = {c: n for c, n in self.known.items() if c in chunks} | {"": 0}
        self.known.update(self._count(new, where))

    def total(self, chunks: list[str], where: Any) -> int:
        """The tokens of `chunks`, counting those not known without keeping them (a text past
        what is remembered)."""
        extra = self._count(list(set(chunks).difference(self.known)), where)
        return sum(self.known[c] if c in self.known else extra[c] for c in chunks)

    def _count(self, chunks: list[str], where: Any) -> dict[str, int]:
        """Each chunk's tokens, COUNT_BATCH chunks to a tokenizer call."""
        out: dict[str, int] = {}
        for start in range(0, len(chunks), COUNT_BATCH):
            part = chunks[start:start + COUNT_BATCH]
            try:
                encodings = self.backend.encode_batch(part, add_special_tokens=False)
            except Exception as err:
                raise _unreadable(where, err) from err
            out.update(zip(part, (len(e.ids) for e in encodings), strict=True))
        return out

    def prefix(self, chunks: list[str], need: int) -> tuple[int, int] | None:
        """The fewest leading chunks whose tokens reach `need`, and their token count; None
        where the chunks have fewer."""
        total = 0
        for n, chunk in enumerate(chunks, 1):
            total += self.known[chunk]
            if total >= need:
                return n, total
        return None


def _cut_long_pair(row: tuple[str, str], sides: tuple[list[str], list[str]], head: int,
                   counts: ChunkCounts, budget: int, where: Any
                   ) -> tuple[tuple[str, str], int] | None:
    """Both sides of a pair cut where longest-first truncation keeps the same tokens as in the
    whole texts, and the tokens the first side keeps; None where that is not known.

    `sides`: each side split at its first `head` spaces (its chunks, then the rest of the
    text where it has more). Longest-first truncation of a pair whose shorter side has more
    than budget // 2 tokens keeps budget // 2 tokens of the shorter side and the rest of the
    budget from the longer (a tie counts the first side as the shorter): what each side keeps
    depends on the whole texts only through which side is shorter. That is known where both
    sides fit in their counted heads, or where the counted head of a longer side alone has
    more tokens than the other side whole; otherwise both whole sides are counted (one row's
    chunks at a time: tokenizing such a pair whole with truncation would make every pairing
    of the two sides' overflowing windows). Each side is cut after the fewest chunks that
    give it more than budget // 2 tokens, the longer side's after one more token than the
    shorter side's cut where needed, so that the cut texts compare as the whole ones do."""
    chunks_a, chunks_b = sides[0][:head], sides[1][:head]
    more_a, more_b = len(sides[0]) > head, len(sides[1]) > head
    known = counts.known
    count_a = sum(map(known.__getitem__, chunks_a))  # the whole side's, or a lower bound
    count_b = sum(map(known.__getitem__, chunks_b))
    if not more_a and not more_b:
        first_shorter = count_a <= count_b
    elif more_b and not more_a and count_b > count_a:
        first_shorter = True
    elif more_a and not more_b and count_a > count_b:
        first_shorter = False
    else:  # which side is shorter needs the whole texts counted
        count_a = counts.total(row[0].split(" "), where)
        count_b = counts.total(row[1].split(" "), where)
        first_shorter = count_a <= count_b
    half = budget // 2
    if (count_a if first_shorter else count_b) <= half:
        return None  # the short side is kept whole: the one-long-side rule, or no cut at all
    if first_shorter:  # its cut must not be longer than the other side's
        cut_a = counts.prefix(chunks_a, half + 1)
        cut_b = counts.prefix(chunks_b, cut_a[1]) if cut_a else None
        first = half
    else:
        cut_b = counts.prefix(chunks_b, half + 1)
        cut_a = counts.prefix(chunks_a, cut_b[1] + 1) if cut_b else None
        first = budget - half
    if cut_a is None or cut_b is None:
        return None
    return (" ".join(chunks_a[:cut_a[0]]), " ".join(chunks_b[:cut_b[0]])), first


def _keeps(encoding: Any, first: int, budget: int) -> bool:
    """Whether a pair cut on both sides kept `first` tokens of its first side and the rest of
    the budget from its second, overflowing (what its whole texts keep)."""
    sides = encoding.sequence_ids
    return (bool(encoding.overflowing) and sides.count(0) == first
            and sides.count(1) == budget - first)


def _exact_after_cut(encoding: Any, side: int, pair: bool, budget: int) -> bool:
    """Whether a row tokenized from a cut has the tokens of its whole text.

    The cut text must still overflow (then so does the whole, and a single text keeps its
    first tokens either way). In a pair, longest-first truncation leaves a side that it cut
    at least budget // 2 tokens, and gives the odd token to the longer side; a whole other
    side with fewer tokens is therefore the shorter one in both texts, kept whole, and
    decides alone what the long side keeps."""
    if not encoding.overflowing:
        return False
    if not pair:
        return True
    other = sum(1 for s in encoding.sequence_ids if s == 1 - side)
    return other < budget // 2


ENCODE_CHARS = 4_000_000  # characters of text per tokenizer call (see _encode_batch)


@dataclass(frozen=True)
class RowEncoding:
    """What featurising keeps of a row's encoding: a truncated encoding also holds every
    overflowing token, so the encodings themselves are let go at once."""

    ids: list[int]
    type_ids: list[int]
    overflowing: bool
    sequence_ids: list[int | None]  # empty where not asked for


def _encode_batch(backend: Any, rows: list[Any], max_len: int, where: Any,
                  checked: set[int] | frozenset[int] = frozenset()) -> list[RowEncoding]:
    """The rows encoded, a few million characters of text to a tokenizer call, so that the
    encodings held at once (each as large as its whole text) stay bounded however long the
    rows are; the sequence ids of the rows in `checked` only."""
    out: list[RowEncoding] = []
    start = 0
    while start < len(rows):
        end, chars = start, 0
        while end < len(rows) and (end == start or chars < ENCODE_CHARS):
            row = rows[end]
            chars += len(row) if isinstance(row, str) else len(row[0]) + len(row[1])
            end += 1
        out += [RowEncoding(e.ids, e.type_ids, bool(e.overflowing),
                            e.sequence_ids if i in checked else [])
                for i, e in enumerate(_encode_rows(backend, rows[start:end], max_len, where),
                                      start)]
        start = end
    return out


def _encode_rows(backend: Any, rows: list[Any], max_len: int, where: Any) -> list[Any]:
    try:
        return backend.encode_batch(rows, add_special_tokens=True)
    except Exception as err:
        if "truncat" in str(err).lower():  # e.g. max_seq_len smaller than the special tokens
            raise DataError(f"{where}: cannot truncate to max_seq_len={max_len} ({err}); raise "
                            "max_seq_len") from err
        raise _unreadable(where, err) from err


def _unreadable(where: Any, err: Exception) -> DataError:
    return DataError(f"{where}: the tokenizer cannot read a row ({type(err).__name__}: "
                     f"{str(err)[:200]}); check the file's text (e.g. invalid characters)")


def _encode_chunk(tokenizer: Any, text_a: list[str], text_b: list[str] | None, max_len: int,
                  where: Any, drop: bool) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """encode_counted for one chunk of rows; the over-long indices are the chunk's own."""
    encoded = encode(tokenizer, text_a, text_b, max_len + 1)
    input_ids: list[list[int]] = encoded["input_ids"]
    type_ids: list[list[int]] = encoded["token_type_ids"]
    too_long = [i for i, ids in enumerate(input_ids) if len(ids) > max_len]
    if drop and too_long:
        skip = set(too_long)
        input_ids = [ids for i, ids in enumerate(input_ids) if i not in skip]
        type_ids = [ids for i, ids in enumerate(type_ids) if i not in skip]
    elif too_long:
        try:
            short = encode(tokenizer, [text_a[i] for i in too_long],
                           None if text_b is None else [text_b[i] for i in too_long], max_len)
        except Exception as err:  # e.g. max_seq_len smaller than the special tokens
            raise DataError(f"{where}: cannot truncate to max_seq_len={max_len} ({err}); raise "
                            "max_seq_len") from err
        for j, i in enumerate(too_long):
            input_ids[i] = short["input_ids"][j]
            type_ids[i] = short["token_type_ids"][j]
    return input_ids, type_ids, too_long
