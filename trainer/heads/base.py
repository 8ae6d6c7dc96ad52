"""What a task head is: the one module that knows everything about its task type.

A head class serves a task type from end to end, so that the data layer, the model and the
training loop never branch on the type:

- `parse(spec, table)` (class method): the task's file, read as a table, into rows whose labels
  are checked; called when a split is read, before anything is tokenized.
- `featurize(spec, rows, tokenizer, max_len, train=..., drop_overlong=...)` (class method): the
  rows into model inputs (one row per sequence, or per window of a long one), counted for
  `data.json`; the result is cached on disk, so this runs once per file and setting.
- `collate(table, pad_id, width=None)` (class method): a batch of those rows into padded
  tensors, as wide as its longest row or, given a width, that wide (static shapes).
- `forward(states, batch)`: the encoder's token states (`Encoded`) into outputs. The head pools
  what it needs: `states.pooled()` gives the run's sentence vector, token-level heads read
  `states.hidden` directly.
- `loss(outputs, batch)`: the batch loss, a plain mean over the batch's examples.
- `predict(outputs, batch)`: a fixed-size tensor per row, on the device (no host sync).
- `score(predictions, references, split)`: the metrics of one dev split from every row's
  prediction, and any prediction files the task type writes.
- `soft_loss` (distillation) and `smoothness` (adversarial training) where they make sense.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from weightsearch.core.errors import ConfigError, DataError
from weightsearch.trainer.data.readers import Table, TaskRows, pair_rows
from weightsearch.trainer.metrics import compute_metrics
from weightsearch.trainer.tasks import TaskSpec


@dataclass
class Encoded:
    """The shared encoder's output for one batch, as a head sees it."""

    hidden: Tensor  # [N, T, H] token states (the task's expert mixture, when there is one)
    mask: Tensor  # [N, T], 1 on real tokens
    pool: Callable[[Tensor, Tensor], Tensor]  # the run's pooling of (hidden, mask) -> [N, H]

    def pooled(self) -> Tensor:
        return self.pool(self.hidden, self.mask)


@dataclass
class Features:
    """A split turned into model inputs: Arrow columns with one row per model input row."""

    columns: dict[str, pa.Array]  # at least input_ids, token_type_ids, length, label
    examples: int  # examples the rows come from (a long context gives several windows)
    overlong: int  # examples cut to the length limit, or dropped (training, overlong: drop)
    notes: dict[str, int] = field(default_factory=dict)  # other counts for data.json
    # What scoring needs beyond the rows (span QA: ids, contexts and gold answers), JSON-able.
    reference: list[dict[str, Any]] | None = None


@dataclass
class EvalSplit:
    """What `score` may need of a dev split besides the predictions."""

    task: str
    name: str  # the split's name ("dev", "matched", ...)
    rows: np.ndarray  # the dataset row of each prediction, in prediction order
    dataset: Any  # the split's datasets.Dataset (its extra columns)
    reference: list[dict[str, Any]] | None
    output_dir: Path | None  # where prediction files go (None: write none)
    epoch: int
    first: bool  # the task's first dev split: files and metrics without a split prefix


class Head(nn.Module):
    """Base of the heads: dropout, then one linear layer in fp32 on the pooled vector."""

    task_type: ClassVar[str]
    # Whether `overlong: drop` leaves this type's over-long training examples out (False: they
    # are cut or windowed whatever the setting, and the console says so).
    drops_overlong: ClassVar[bool] = True
    # Whether the training step's forward and loss are device arithmetic alone (no host reads,
    # no shapes from values), so a CUDA graph may capture them (`cuda_graphs`); False: the
    # type's batches train in the eager loop.
    capturable: ClassVar[bool] = True

    def __init__(self, hidden_size: int, spec: TaskSpec) -> None:
        super().__init__()
        self.spec = spec
        self.dropout = nn.Dropout(spec.dropout)
        self.proj = nn.Linear(hidden_size, self.out_features(spec))

    # ---- data --------------------------------------------------------------------------

    @classmethod
    def parse(cls, spec: TaskSpec, table: Table) -> Any:
        return pair_rows(spec, table)

    @classmethod
    def featurize(cls, spec: TaskSpec, rows: TaskRows, tokenizer: Any, max_len: int, *,
                  train: bool, drop_overlong: bool = False) -> Features:
        return encode_pairs(rows, tokenizer, max_len, drop=train and drop_overlong)

    @classmethod
    def collate(cls, table: pa.Table, pad_id: int, width: int | None = None
                ) -> dict[str, Tensor]:
        return collate_sequences(table, pad_id, width)

    @classmethod
    def describe_split(cls, spec: TaskSpec, split: str, overlong: int, notes: dict[str, int],
                       limit: int, dropped: bool) -> list[str]:
        """Console lines on what fitting a split to its token limit did (counts from
        `featurize`); the same counts go to `data.json`."""
        if not overlong:
            return []
        if dropped:
            return [f"{overlong} {split} examples longer than max_seq_len={limit} dropped "
                    "(overlong: drop; overlong: truncate keeps them, cut to the limit)"]
        return [f"{overlong} {split} examples truncated to {limit} tokens"]

    # ---- model -------------------------------------------------------------------------

    @staticmethod
    def out_features(spec: TaskSpec) -> int:
        return 1

    def forward(self, states: Encoded, batch: dict[str, Tensor]) -> Tensor:
        """Logits [N, C] (classification) or one score per row [N] (the others)."""
        return self.project(states.pooled()).squeeze(-1)

    def project(self, pooled: Tensor) -> Tensor:
        # fp32 even under bf16 autocast: the layer is tiny, and bf16's 8-bit mantissa rounds
        # scores near 2.5 to steps of 0.016, erasing the small differences between examples
        # that a young regression or ranking head ranks them by.
        with torch.autocast(pooled.device.type, enabled=False):
            return self.proj(self.dropout(pooled.float()))

    def loss(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def predict(self, outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def score(self, predictions: np.ndarray, references: np.ndarray,
              split: EvalSplit) -> dict[str, float]:
        return compute_metrics(self.spec.metrics, predictions, references)

    def soft_loss(self, outputs: Tensor, soft: Tensor) -> Tensor:
        """Loss against a teacher ensemble's targets (distillation): squared error to their mean
        score. Heads whose outputs are not one score per example override or refuse it."""
        return F.mse_loss(outputs, soft)

    def smoothness(self, a: Tensor, b: Tensor) -> Tensor:
        """Symmetric divergence between two outputs for the same batch (adversarial training).

        Scores: squared difference, the mean over the batch; gradients reach both sides.
        """
        return (a - b).pow(2).mean()

    def ascent_divergence(self, perturbed: Tensor, clean: Tensor, total: bool = False) -> Tensor:
        """What SMART's ascent step climbs, from the `perturbed` outputs to the (constant)
        `clean` ones: scores' squared difference, as the reference's `F.mse_loss`; its mean
        (SIWLM's copy of the MT-DNN code), or with `total` its sum (the current MT-DNN code).
        Heads without a reference form climb their `smoothness` (times the rows, for `total`)."""
        if type(self).smoothness is not Head.smoothness:  # a head's own divergence
            return self.smoothness(perturbed, clean) * (perturbed.shape[0] if total else 1)
        squared = (perturbed - clean).pow(2)
        return squared.sum() if total else squared.mean()


STABLE_KL_EPS = 1e-6  # the reference's default


def stable_kl(logits: Tensor, target: Tensor, total: bool = False) -> Tensor:
    """The divergence the reference MT-DNN code's SMART ascends for class distributions
    (`stable_kl` in its `mt_dnn/loss.py`): with p = softmax(logits), y = softmax(target) and
    r(q) = log(1 / (1 / (q + eps) - 1 + eps)), a constant, the sum over classes of
    2 p (r(p) - r(y)), averaged over the leading axis (SIWLM's copy), or with `total` summed
    (the current code's `reduce=False`). Only p carries a gradient, and it is not that of a KL
    divergence."""
    p = F.softmax(logits.reshape(-1, logits.shape[-1]).float(), dim=-1)
    y = F.softmax(target.reshape(-1, target.shape[-1]).float(), dim=-1)
    eps = STABLE_KL_EPS
    r_p = -torch.log(1.0 / (p.detach() + eps) - 1 + eps)
    r_y = -torch.log(1.0 / (y.detach() + eps) - 1 + eps)
    summed = (p * (r_p - r_y) * 2).sum()
    return summed if total else summed / p.shape[0]


def symmetric_kl(a: Tensor, b: Tensor) -> Tensor:
    """KL(b || a) + KL(a || b) over the last axis, each side pulled towards the other's
    (constant) distribution; mean over the leading axis."""
    log_a, log_b = F.log_softmax(a, dim=-1), F.log_softmax(b, dim=-1)
    return (F.kl_div(log_a, log_b.detach(), log_target=True, reduction="batchmean")
            + F.kl_div(log_b, log_a.detach(), log_target=True, reduction="batchmean"))


def refuse_soft_targets(task_type: str) -> Callable[..., Tensor]:
    def soft_loss(self: Head, outputs: Tensor, soft: Tensor) -> Tensor:
        raise ConfigError([f"distill: {self.spec.name} is a {task_type} task; soft targets are "
                           "built for classification and regression tasks only"])
    return soft_loss


# ---- text pairs: tokenizing and padding shared by the sentence(-pair) heads ---------------

def encode(tokenizer: Any, text_a: list[str], text_b: list[str] | None,
           max_length: int | None) -> dict[str, list[list[int]]]:
    """One fast-tokenizer call; max_length=None means no truncation."""
    return tokenizer(text_a, text_b, truncation=max_length is not None, max_length=max_length,
                     return_token_type_ids=True, return_attention_mask=False, verbose=False)


def encode_pairs(rows: TaskRows, tokenizer: Any, max_len: int, drop: bool = False) -> Features:
    """Text (pair) rows into token ids: longer ones cut to max_len (pairs: longest first), or,
    with drop, left out. Either way they are counted."""
    input_ids, type_ids, too_long = encode_counted(tokenizer, rows.text_a, rows.text_b, max_len,
                                                   rows.path, drop)
    labels, groups = rows.labels, rows.groups
    if drop and too_long:
        keep = np.ones(len(rows), dtype=bool)
        keep[too_long] = False
        labels = np.asarray(labels)[keep]
        groups = None if groups is None else np.asarray(groups)[keep]
    lengths = np.fromiter((len(ids) for ids in input_ids), dtype=np.int32, count=len(input_ids))
    columns: dict[str, pa.Array] = {
        "input_ids": list_array(input_ids, lengths, pa.int32()),
        "token_type_ids": list_array(type_ids, lengths, pa.int8()),
        "length": pa.array(lengths),
        "label": pa.array(labels),
    }
    if groups is not None:
        columns["group"] = pa.array(groups)
    return Features(columns, examples=len(input_ids), overlong=len(too_long))


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
    if long_pairs:  # only made where there are counts
        assert counts is not None
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


def list_array(seqs: list[list[int]], lengths: np.ndarray, value_type: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(seqs),
                         dtype=value_type.to_pandas_dtype(), count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type))


def collate_sequences(table: pa.Table, pad_id: int, width: int | None = None
                      ) -> dict[str, Tensor]:
    """Pad a batch of sequences to its longest (or to `width`); attention_mask is 1 on real
    tokens. `label` becomes `labels`; every other scalar column (group, answer positions, ...)
    passes through."""
    lengths = table.column("length").to_numpy().astype(np.int64)
    ids, types, mask = pad(flat(table, "input_ids"), flat(table, "token_type_ids"), lengths,
                           pad_id, width)
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    for name in table.column_names:
        if name in ("input_ids", "token_type_ids", "length"):
            continue
        column = table.column(name)
        if pa.types.is_list(column.type):
            continue  # per-token columns that only scoring reads (span offsets)
        values = column.to_numpy()
        batch["labels" if name == "label" else name] = (
            torch.from_numpy(values.astype(np.float32)) if np.issubdtype(values.dtype, np.floating)
            else torch.from_numpy(values.astype(np.int64)))
    return batch


def pad(ids: np.ndarray, types: np.ndarray, lengths: np.ndarray, pad_id: int,
        width: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Flattened token ids of sequences with these lengths, as padded [N, T] tensors: T is the
    longest length, or `width` (at least the longest)."""
    longest = int(lengths.max()) if len(lengths) else 0
    if width is not None and width < longest:
        raise ValueError(f"pad: width {width} is shorter than the longest row ({longest})")
    width = longest if width is None else width
    mask = np.arange(width)[None, :] < lengths[:, None]  # row-major order = flattened tokens
    input_ids = np.full((len(lengths), width), pad_id, dtype=np.int64)
    input_ids[mask] = ids
    token_type_ids = np.zeros((len(lengths), width), dtype=np.int64)
    token_type_ids[mask] = types
    return (torch.from_numpy(input_ids), torch.from_numpy(token_type_ids),
            torch.from_numpy(mask.astype(np.int64)))


def flat(table: pa.Table, name: str) -> np.ndarray:
    """A list column's values, all rows concatenated (nested lists flattened all the way)."""
    column = table.column(name).combine_chunks()
    while pa.types.is_list(column.type):
        column = column.flatten()
    return column.to_numpy(zero_copy_only=False)
