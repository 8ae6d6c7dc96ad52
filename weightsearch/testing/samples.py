"""A task's sample data as the suites of task types and heads read it: the task defined as a
run config defines it, its files read, featurised and cached as a run does, and a stand-in
encoder (a fixed random embedding of each token id) whose token states feed the heads, so no
model is loaded. Each sample is read once per process."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import torch

from weightsearch.testing.suite import Conformance
from weightsearch.trainer import load_config
from weightsearch.trainer.encoders import default_encoder_path, load_tokenizer
from weightsearch.trainer.heads import Encoded, build_head
from weightsearch.trainer.run_data import load_data
from weightsearch.trainer.task_data import eval_batches

VOCAB_ROWS = 997  # rows of the stand-in embedding; token ids wrap around it


@dataclass(frozen=True)
class Sample:
    """A task's data as a run holds it, and what read it."""

    cfg: Any  # the RunConfig of a run of this task alone
    spec: Any  # its TaskSpec
    data: Any  # its TaskData: the tokenized splits
    tokenizer: Any
    cache: tempfile.TemporaryDirectory[str]  # the tokenized cache the data is read from

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id or 0)


@lru_cache(maxsize=4)
def tokenizer_of(encoder: str | None) -> Any:
    return load_tokenizer(encoder or default_encoder_path())


_SAMPLES: dict[str, Sample] = {}


def load_sample(task: str | Mapping[str, Any], data_dir: str, encoder: str | None,
                max_seq_len: int, examples: int) -> Sample:
    """The task's sample (`examples` rows of each split, the first ones), read once."""
    key = json.dumps([task, data_dir, encoder, max_seq_len, examples], sort_keys=True,
                     default=str)
    if key not in _SAMPLES:
        cache = tempfile.TemporaryDirectory(prefix="weightsearch-conformance-")
        cfg = load_config({"data_dir": data_dir, "tasks": [task], "max_seq_len": max_seq_len,
                           "max_train_examples": examples, "max_eval_examples": examples,
                           "subsample": "head", "cache_dir": cache.name})
        tokenizer = tokenizer_of(encoder)
        (data,) = load_data(cfg, tokenizer).values()
        _SAMPLES[key] = Sample(cfg, cfg.tasks[0], data, tokenizer, cache)
    return _SAMPLES[key]


def first_token(hidden: Any, mask: Any) -> Any:
    """The stand-in encoder's pooling: the first token's state (BERT's [CLS])."""
    return hidden[:, 0]


def stand_in_states(batch: Mapping[str, Any], hidden_size: int,
                    requires_grad: bool = False) -> Any:
    """The token states a fixed random embedding gives the batch's token ids (`Encoded`): the
    same token gets the same state in any batch, whatever its padding."""
    table = torch.randn(VOCAB_ROWS, hidden_size, generator=torch.Generator().manual_seed(0))
    hidden = table[batch["input_ids"] % VOCAB_ROWS].requires_grad_(requires_grad)
    return Encoded(hidden, batch["attention_mask"], first_token)


class TaskSample(Conformance):
    """The settings of the suites that read a task's data: `task` (a task as a run config's
    `tasks:` lists it: a preset name or a mapping), `data_dir` (where its files are), and
    `encoder` (whose tokenizer reads them; None: the default encoder's)."""

    task: ClassVar[str | Mapping[str, Any]]
    data_dir: ClassVar[str | os.PathLike[str]]
    encoder: ClassVar[str | None] = None
    max_seq_len: ClassVar[int] = 64
    examples: ClassVar[int] = 16  # rows read from each split
    batch_size: ClassVar[int] = 4
    hidden_size: ClassVar[int] = 16  # the stand-in encoder's

    def sample(self) -> Sample:
        return load_sample(self.task, os.fspath(self.data_dir), self.encoder, self.max_seq_len,
                           self.examples)

    def first_batch(self) -> dict[str, Any]:
        """The first training batch as the loop collates it (a ranking list kept whole)."""
        sample = self.sample()
        indices = eval_batches(sample.data.train, self.batch_size)[0]
        return dict(sample.data.collate(sample.data.train, indices, sample.pad_id))

    def head(self, seed: int = 0) -> Any:
        """A fresh head of the task, its parameters drawn from `seed` (the caller's random
        state left as it was)."""
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return build_head(self.sample().spec, self.hidden_size)
