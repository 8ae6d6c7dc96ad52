"""A run gives the memory it freed back to the system between phases
(`weightsearch.trainer.memory`): glibc would otherwise keep it in its heap, and the RSS a run
reaches in its first epoch would stay."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

# 100 blocks of 4 MiB (an activation's size), each followed by a small block that stays alive,
# as a training step leaves them; then the big ones are freed. A 4 MiB block freed first raises
# glibc's mmap threshold, as the first steps of a run do, so the blocks come from the heap.
_HELD = """
import sys, numpy as np
from weightsearch.trainer.memory import give_back
def rss():
    lines = open('/proc/self/status').read().splitlines()
    return next(int(l.split()[1]) for l in lines if l.startswith('VmRSS')) / 1024
x = np.ones((4 << 20) // 8); del x
base = rss()
blocks, pins = [], []
for _ in range(100):
    blocks.append(np.ones((4 << 20) // 8)); pins.append(np.ones(64))
del blocks
if sys.argv[1] == 'on':
    assert give_back()
print(round(rss() - base))
"""


def _held_mib(setting: str) -> int:
    out = subprocess.run([sys.executable, "-c", _HELD, setting], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    return int(out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator (Linux)")
def test_freed_heap_memory_goes_back_to_the_system():
    assert _held_mib("off") > 300  # glibc's default keeps most of the 400 MiB
    assert _held_mib("on") < 40


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_recomputed_activations_train_the_same_run(precision, sample_data_dir, tiny_encoder,
                                                   tmp_path):
    """recompute_activations redraws each layer's dropout masks from the saved random state,
    and recomputes attention in the forward pass's precision, so the run is the plain one:
    the same loss at every step and the same dev metrics."""
    from tests.helpers import read_jsonl, train_tiny_run
    from weightsearch.trainer.resume import resume_settings

    plain_run = train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / "plain",
                               precision=precision)
    run = train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / "run",
                         precision=precision, recompute_activations=True)
    plain = [r["loss"] for r in read_jsonl(plain_run.out / "steps.jsonl")]
    recomputed = [r["loss"] for r in read_jsonl(run.out / "steps.jsonl")]
    assert len(recomputed) == len(plain) > 10
    assert recomputed == plain
    assert run.result.final == plain_run.result.final
    # the same outcome, so a run may resume with the setting changed
    assert resume_settings(run.cfg) == resume_settings(plain_run.cfg)


def test_a_run_with_the_setting_recomputes_its_layers(sample_data_dir, tiny_encoder, tmp_path):
    """The setting reaches the encoder the run builds: its layers are checkpointed."""
    from tests.helpers import run_config
    from weightsearch.trainer.device import select_runtime
    from weightsearch.trainer.loop import _build_model

    for flag in (False, True):
        cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run",
                         recompute_activations=flag)
        encoder = _build_model(cfg, tiny_encoder, None, select_runtime("cpu", "fp32")).encoder
        # the property's name since transformers 5.x, and before
        on = getattr(encoder, "is_activation_checkpointing", None)
        assert (encoder.is_gradient_checkpointing if on is None else on) is flag


def test_recomputing_saves_only_what_the_checkpoints_take(sample_data_dir, tiny_encoder):
    """What one training forward pass hands autograd to save for its backward pass, with and
    without recomputation, counted storage by storage: with it, the checkpointed layers' own
    activations are not saved (what the layers save while recomputing is transient, and the
    RSS it spares is measured in BENCHMARKS.md section 4)."""
    import torch

    from weightsearch.trainer.model import load_encoder, recompute_activations

    def saved_bytes(recompute: bool) -> int:
        encoder = load_encoder(tiny_encoder, seed=1)
        if recompute:
            recompute_activations(encoder, tiny_encoder)
        encoder.train()
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        ids = torch.randint(1000, 20000, (8, 64))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = encoder(input_ids=ids, attention_mask=torch.ones_like(ids))
        out.last_hidden_state.sum().backward()
        return sum(seen.values())

    plain, recomputed = saved_bytes(False), saved_bytes(True)
    assert recomputed < plain / 3
