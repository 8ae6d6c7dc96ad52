"""The conformance suite of heads: what the network a task's type and answer module (`head:`)
build must keep for the training loop, checkpoints, distillation, SMART and fused runs (the
`Head` docstring lists the methods), checked on a batch of a task's files with a stand-in
encoder's token states (no model is loaded).

    from weightsearch.testing import HeadConformance, check_head

    class TestMyAnswerModule(HeadConformance):  # pytest collects it as it stands
        task = {"preset": "rte", "head": "mine"}  # as a run config's `tasks:` lists it
        data_dir = "data/glue_sample"

    check_head({"preset": "rte", "head": "mine"}, "data/glue_sample")  # without pytest

Reading and scoring the task's files is `TaskTypeConformance`'s.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch.func import functional_call, stack_module_state, vmap

from weightsearch.testing.samples import TaskSample, stand_in_states
from weightsearch.testing.suite import ConformanceError, expect, run_suite
from weightsearch.trainer.checkpoint import load_weights, save_weights
from weightsearch.trainer.heads import Encoded
from weightsearch.trainer.task_types import TASK_TYPES

MEMBERS = 2  # stacked copies in the fused-path check


def scalar(value: Any) -> bool:
    """Whether `value` is a finite 0-d tensor (a loss)."""
    return isinstance(value, torch.Tensor) and value.shape == () and bool(torch.isfinite(value))


class HeadConformance(TaskSample):
    """Checks of the head a task builds; set `task` (with its `head:` where the type offers
    more than one answer module) and `data_dir`. `vectorises = False` for a head that cannot
    run under `torch.func.vmap` (its runs are then trained one by one, never fused)."""

    vectorises: ClassVar[bool] = True

    def outputs(self, head: Any, batch: Mapping[str, Any]) -> Any:
        return head(stand_in_states(batch, self.hidden_size), batch)

    def test_outputs(self) -> None:
        spec, batch = self.sample().spec, self.first_batch()
        head = self.head().eval()
        out = self.outputs(head, batch)
        rows = batch["labels"].shape[0]
        expect(isinstance(out, torch.Tensor) and out.shape[:1] == (rows,),
               f"forward gave {getattr(out, 'shape', out)} for a batch of {rows} examples")
        if TASK_TYPES[spec.type].class_outputs:
            expect(out.shape == (rows, spec.num_labels),
                   f"class outputs {tuple(out.shape)}, not ({rows}, {spec.num_labels})")
        expect(bool(torch.isfinite(out).all()), "forward gave values that are not finite")
        expect(torch.equal(out, self.outputs(head, batch)),
               "forward in eval mode gave another answer the second time")

    def test_loss_trains_the_head_and_reaches_the_encoder(self) -> None:
        batch = self.first_batch()
        head = self.head().train()
        states = stand_in_states(batch, self.hidden_size, requires_grad=True)
        loss = head.loss(head(states, batch).float(), batch)
        expect(scalar(loss), f"loss gave {loss!r}, not a finite scalar tensor")
        loss.backward()
        expect(states.hidden.grad is not None and bool(states.hidden.grad.abs().sum() > 0),
               "no gradient reaches the encoder's token states")
        idle = [name for name, p in head.named_parameters() if p.grad is None]
        expect(not idle, f"parameters {idle} get no gradient from the loss")

    def test_predictions(self) -> None:
        batch = self.first_batch()
        head = self.head().eval()
        with torch.inference_mode():
            prediction = head.predict(self.outputs(head, batch).float(), batch)
        expect(isinstance(prediction, torch.Tensor)
               and prediction.shape[:1] == batch["labels"].shape[:1],
               f"predict gave {getattr(prediction, 'shape', prediction)} for "
               f"{batch['labels'].shape[0]} labels")

    def test_weights_round_trip_through_a_checkpoint(self) -> None:
        """A checkpoint's safetensors file holds the head: another head loads it and answers
        as the first one."""
        batch = self.first_batch()
        head, other = self.head(0).eval(), self.head(1).eval()
        with tempfile.TemporaryDirectory() as folder:
            file = Path(folder) / "model.safetensors"
            save_weights(head, file)
            load_weights(other, file, torch.device("cpu"))
        expect(torch.equal(self.outputs(head, batch), self.outputs(other, batch)),
               "a head loaded from the saved weights answers otherwise")

    def test_soft_targets(self) -> None:
        """A distillable type learns from a teacher ensemble's targets: class distributions
        (class outputs) or one score per example."""
        spec, batch = self.sample().spec, self.first_batch()
        if not TASK_TYPES[spec.type].distillable:
            return
        head = self.head().train()
        out = head(stand_in_states(batch, self.hidden_size), batch).float()
        noise = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        soft = noise.softmax(-1) if TASK_TYPES[spec.type].class_outputs else noise
        loss = head.soft_loss(out, soft)
        expect(scalar(loss), f"soft_loss gave {loss!r}, not a finite scalar tensor")
        loss.backward()

    def test_smoothness(self) -> None:
        """SMART's terms: the divergence between two outputs for one batch, 0 between equal
        ones, and what its ascent step climbs (a mean, or with `total` a sum)."""
        batch = self.first_batch()
        head = self.head().train()
        out = head(stand_in_states(batch, self.hidden_size), batch).float()
        moved = out + 0.1 * torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
        apart = head.smoothness(out, moved)
        expect(scalar(apart) and apart.item() >= -1e-6, f"smoothness gave {apart!r}")
        same = head.smoothness(out.detach(), out.detach())
        expect(scalar(same) and abs(same.item()) < 1e-5, f"smoothness(a, a) = {same!r}, not 0")
        for total in (False, True):
            climbed = head.ascent_divergence(moved, out.detach(), total)
            expect(scalar(climbed), f"ascent_divergence(total={total}) gave {climbed!r}")
        apart.backward()

    def test_vectorises_over_stacked_models(self) -> None:
        """Fused runs call the head through `torch.func.vmap` over stacked copies of the
        model, dropout drawn once for all (`randomness="same"`): each copy answers as it does
        alone, and the summed losses train the copies."""
        if not self.vectorises:
            return
        batch = self.first_batch()
        copies = [self.head(seed) for seed in range(MEMBERS)]
        params, buffers = stack_module_state(copies)  # type: ignore[arg-type]
        states = stand_in_states(batch, self.hidden_size)
        hidden = torch.stack([states.hidden + k for k in range(MEMBERS)])

        def one(weights: dict[str, Any], extra: dict[str, Any], own: Any) -> Any:
            encoded = Encoded(own, states.mask, states.pool)
            return functional_call(copies[0], (weights, extra), (encoded, batch))

        with warnings.catch_warnings():  # torch's fallback for ops without a batching rule
            warnings.filterwarnings("ignore", message="There is a performance drop")
            for head in copies:
                head.eval()
            stacked = self.vmapped(one, params, buffers, hidden)
            for k, head in enumerate(copies):
                alone = head(Encoded(hidden[k], states.mask, states.pool), batch)
                expect(torch.allclose(stacked[k], alone, atol=1e-5),
                       f"copy {k} answers otherwise under vmap")
            for head in copies:
                head.train()
            stacked = self.vmapped(one, params, buffers, hidden)
            total = sum(copies[0].loss(stacked[k].float(), batch) for k in range(MEMBERS))
            total.backward()  # type: ignore[union-attr]
        expect(any(p.grad is not None for p in params.values()),
               "the summed losses of the stacked copies train none of their parameters")


    @staticmethod
    def vmapped(one: Callable[..., Any], *args: Any) -> Any:
        try:
            return vmap(one, randomness="same")(*args)
        except Exception as err:  # whatever vmap or the head raises
            raise ConformanceError(f"forward does not run under torch.func.vmap ({err}); fused "
                                   "runs refuse such a head: set vectorises = False to say so"
                                   ) from err


def check_head(task: str | Mapping[str, Any], data_dir: str | os.PathLike[str],
               **options: Any) -> None:
    """Every check of `HeadConformance` on the head `task` builds (a preset name or a task
    mapping, with its `head:`) on a batch of its files in `data_dir`, and any attribute."""
    run_suite(HeadConformance, {"task": task, "data_dir": data_dir, **options})
