"""The conformance suite of task types: what every type registered with `register_task_type`
and its head class must keep so that a run reads, featurises, batches, caches and scores its
tasks (the `Head` docstring lists the methods), checked on a few rows of a task's files.

    from weightsearch.testing import TaskTypeConformance, check_task_type

    class TestMyType(TaskTypeConformance):      # pytest collects it as it stands
        task = {"name": "mine", "type": "my_type", "train_file": "train.tsv",
                "dev_files": {"dev": "dev.tsv"}, ...}   # as a run config's `tasks:` lists it
        data_dir = "tests/data"

    check_task_type({"name": "mine", ...}, "tests/data")   # the same checks, without pytest

The network itself (outputs, loss, weights, the fused path) is `HeadConformance`'s.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from weightsearch.testing.samples import TaskSample, stand_in_states
from weightsearch.testing.suite import expect, run_suite
from weightsearch.trainer.data.readers import read_task_table, resolve_path
from weightsearch.trainer.heads import EvalSplit, Head, head_class
from weightsearch.trainer.run_data import load_data
from weightsearch.trainer.task_data import batch_plan, eval_batches, token_limits
from weightsearch.trainer.task_rows import parser
from weightsearch.trainer.task_types import TASK_TYPES

COLUMNS = ("input_ids", "token_type_ids", "length", "label")  # every featurised split has them
BUCKETS = 2  # fixed widths for the static-shapes check


def real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class TaskTypeConformance(TaskSample):
    """Checks of one task type on a task of that type; set `task` and `data_dir`."""

    def kind(self) -> Any:
        kind = TASK_TYPES.get(self.sample().spec.type)
        expect(kind is not None, f"no task type {self.sample().spec.type!r} is registered")
        return kind

    def test_registered(self) -> None:
        kind, spec = self.kind(), self.sample().spec
        head = head_class(kind.name)
        expect(isinstance(head, type) and issubclass(head, Head),
               f"{kind.head_module}.HEAD is {head!r}, not a Head subclass")
        expect(head.task_type == kind.name, f"HEAD.task_type is {head.task_type!r}")
        for flag in ("drops_overlong", "capturable"):
            expect(isinstance(getattr(head, flag), bool), f"HEAD.{flag} is not a bool")
        expect(set(spec.metrics) <= set(kind.metrics) and spec.primary_metric in spec.metrics,
               f"the task's metrics {spec.metrics} ({spec.primary_metric}) are not the type's")
        if kind.parser is not None:
            module, _, name = kind.parser.partition(":")
            expect(callable(getattr(importlib.import_module(module), name, None)),
                   f"parser {kind.parser!r} names no function")

    def test_rows(self) -> None:
        """The torch-free parser (a study's driver counts training rows with it) reads the
        rows the head class reads, and the rows take the subsets a run asks for."""
        sample = self.sample()
        spec = sample.spec
        table = read_task_table(spec, resolve_path(sample.cfg.data_dir, spec.train_file))
        rows = head_class(spec.type).parse(spec, table)
        counted = parser(spec.type)(spec, table)
        expect(len(counted) == len(rows) > 0,
               f"the parser reads {len(counted)} rows, the head class {len(rows)}")
        n = min(3, len(rows))
        expect(len(rows.head(n)) == n, f"rows.head({n}) has {len(rows.head(n))} rows")
        expect(0 < len(rows.sample(n, 0)) <= len(rows), "rows.sample(n, seed) drew no rows")
        # Over-long training examples are left out where the run and the type say so.
        dropped = sample.cfg.overlong_policy == "drop" and head_class(spec.type).drops_overlong
        kept = sample.data.train_size + (sample.data.truncated["train"] if dropped else 0)
        expect(kept == min(self.examples, len(rows)),
               f"featurising {min(self.examples, len(rows))} rows counted {kept} examples")

    def splits(self) -> dict[str, Any]:
        data = self.sample().data
        return {"train": data.train, **data.evals}

    def test_features(self) -> None:
        sample = self.sample()
        cfg, data = sample.cfg, sample.data
        limits = token_limits(sample.spec, cfg.max_seq_len, cfg.eval_max_seq_len)
        for split, ds in self.splits().items():
            missing = set(COLUMNS) - set(ds.column_names)
            expect(not missing, f"{split}: featurize made no column {', '.join(sorted(missing))}")
            expect(len(ds) > 0, f"{split}: no rows")
            lengths = np.asarray(ds["length"])
            limit = limits[0] if split == "train" else limits[1]
            expect(lengths.min() >= 1 and lengths.max() <= limit,
                   f"{split}: lengths from {lengths.min()} to {lengths.max()}, limit {limit}")
            overlong = data.truncated[split]
            expect(isinstance(overlong, int) and overlong >= 0, f"{split}: overlong {overlong!r}")
            notes = data.notes.get(split, {})
            expect(all(isinstance(v, int) for v in notes.values()), f"{split}: notes {notes}")
            for dropped in (False, True):
                lines = data.head.describe_split(sample.spec, split, overlong, notes, limit,
                                                 dropped)
                expect(isinstance(lines, list) and all(isinstance(x, str) for x in lines),
                       f"describe_split gave {lines!r}, not a list of lines")

    def test_cache_round_trip(self) -> None:
        """Runs read the tokenized splits from the cache (Arrow files, and JSON beside them):
        they hold the rows, counts and references that featurising gives."""
        sample = self.sample()
        uncached = dataclasses.replace(sample.cfg, cache_dir=None)
        (built,) = load_data(uncached, sample.tokenizer).values()
        cached = sample.data
        for split, ds in self.splits().items():
            fresh = built.train if split == "train" else built.evals[split]
            expect(fresh.to_dict() == ds.to_dict(), f"{split}: the cache gives other rows")
        expect((built.train_examples, built.truncated, built.notes, built.references)
               == (cached.train_examples, cached.truncated, cached.notes, cached.references),
               "the cache gives other counts or references")

    def test_batches(self) -> None:
        """Batching keeps every row once and a ranking list whole; collating gives padded
        tensors, as wide as the batch or, with static shapes, one of the fixed widths."""
        sample = self.sample()
        data = sample.data
        plan = [indices for _, indices in batch_plan({"task": data}, self.batch_size, 1, 1)]
        self.check_cover(data.train, plan, "train (batch_plan)")
        fixed = dataclasses.replace(data)
        fixed.use_buckets(BUCKETS, sample.cfg.max_seq_len, sample.cfg.eval_max_seq_len)
        for split, ds in self.splits().items():
            batches = eval_batches(ds, self.batch_size)
            self.check_cover(ds, batches, split)
            for indices in batches:
                self.check_batch(data.collate(ds, indices, sample.pad_id), len(indices), None)
                widths = fixed.train_widths if split == "train" else fixed.eval_widths
                self.check_batch(fixed.collate(ds, indices, sample.pad_id), len(indices), widths)

    def check_cover(self, ds: Any, batches: list[Any], where: str) -> None:
        rows = sorted(int(i) for b in batches for i in b)
        expect(rows == list(range(len(ds))), f"{where}: the batches do not hold each row once")
        if "group" in ds.column_names:
            groups = np.asarray(ds["group"])
            owner: dict[int, int] = {}
            for b, indices in enumerate(batches):
                for group in set(groups[indices].tolist()):
                    expect(owner.setdefault(group, b) == b, f"{where}: a list split in two")

    def check_batch(self, batch: Mapping[str, Any], examples: int,
                    widths: tuple[int, ...] | None) -> None:
        ids, mask, types = (batch.get(k) for k in ("input_ids", "attention_mask",
                                                   "token_type_ids"))
        labels = batch.get("labels")
        expect(all(isinstance(t, torch.Tensor) for t in (ids, mask, types, labels)),
               f"collate gave {sorted(batch)}: want input_ids, attention_mask, token_type_ids "
               "and labels as tensors")
        assert ids is not None and mask is not None and types is not None and labels is not None
        expect(ids.dtype == torch.int64 and ids.ndim == 2 and mask.shape == types.shape
               == ids.shape, f"input_ids {tuple(ids.shape)} {ids.dtype}, attention_mask "
                             f"{tuple(mask.shape)}, token_type_ids {tuple(types.shape)}")
        expect(bool(((mask == 0) | (mask == 1)).all()) and bool((mask.sum(1) >= 1).all()),
               "attention_mask must be 0 or 1, at least one 1 a row")
        expect(labels.shape[0] == examples and ids.shape[0] % examples == 0,
               f"{examples} rows collated into {ids.shape[0]} sequences, {labels.shape[0]} "
               "labels")
        expect(widths is None or ids.shape[1] in widths,
               f"with static shapes the batch is {ids.shape[1]} wide, not one of {widths}")

    def test_scores(self) -> None:
        """Each dev split scored as the loop scores it: every prediction batch as long as its
        labels, and the task's metrics (JSON numbers; the primary one finite)."""
        sample = self.sample()
        spec, data, head = sample.spec, sample.data, self.head().eval()
        for i, (split, ds) in enumerate(data.evals.items()):
            preds, refs, order = [], [], []
            for indices in eval_batches(ds, self.batch_size):
                batch = data.collate(ds, indices, sample.pad_id)
                with torch.inference_mode():
                    prediction = head.predict(head(stand_in_states(batch, self.hidden_size),
                                                   batch).float(), batch)
                expect(prediction.shape[:1] == batch["labels"].shape[:1],
                       f"{split}: {prediction.shape[0]} predictions for "
                       f"{batch['labels'].shape[0]} labels")
                preds.append(prediction)
                refs.append(batch["labels"])
                order.append(indices)
            values = head.score(torch.cat(preds).numpy(), torch.cat(refs).numpy(),
                                EvalSplit(spec.name, split, np.concatenate(order), ds,
                                          data.references.get(split), None, 1, first=i == 0))
            self.check_metrics(values, split)

    def check_metrics(self, values: Any, split: str) -> None:
        spec = self.sample().spec
        expect(isinstance(values, dict) and set(spec.metrics) <= set(values),
               f"{split}: score gave {values!r}, not every metric of {spec.metrics}")
        expect(all(real(v) for v in values.values()) and json.dumps(values),
               f"{split}: score gave {values!r}; metrics are numbers")
        primary = values[spec.primary_metric]
        expect(math.isfinite(primary), f"{split}: the primary metric {spec.primary_metric} is "
                                       f"{primary}")


def check_task_type(task: str | Mapping[str, Any], data_dir: str | os.PathLike[str],
                    **options: Any) -> None:
    """Every check of `TaskTypeConformance` on `task` (a preset name or a task mapping, as a
    run config's `tasks:` lists it) whose files are in `data_dir`, and any other attribute."""
    run_suite(TaskTypeConformance, {"task": task, "data_dir": data_dir, **options})
