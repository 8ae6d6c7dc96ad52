"""`fuse_cells: auto`'s sizing (`weightsearch.trainer.fuse_size`): K from measured numbers (a
pure function, checked with numbers), the probe's steps on the real trainer with a tiny encoder
on the CPU (nothing to measure there: K is 1), and on a CUDA GPU a real measurement (`gpu`)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import run_config
from weightsearch.trainer.fuse_size import (
    CPU,
    SAFETY_MARGIN,
    FuseMemory,
    fuse_memory,
    fused_size,
    longest_batch,
    measure_fuse_memory,
    memory_key,
)
from weightsearch.trainer.loop import set_up

H200 = FuseMemory("NVIDIA H200", free_mib=140_000.0, total_mib=143_771.0, one_mib=1_600.0,
                  two_mib=3_100.0)


def test_k_is_what_fits_in_the_free_memory_less_the_margin() -> None:
    per, base = 1_500.0, 100.0
    expected = math.floor((140_000.0 * (1 - SAFETY_MARGIN) - base) / per)  # 79
    assert fused_size(H200, share=1.0, cap=1_000) == expected
    assert fused_size(H200, share=1.0, cap=64) == 64  # the cap holds
    # half a card: the trial may use half the card's size, not what happens to be free
    half = math.floor((143_771.0 / 2 * (1 - SAFETY_MARGIN) - base) / per)
    assert fused_size(H200, share=0.5, cap=1_000) == half
    busy = FuseMemory("NVIDIA H200", free_mib=3_000.0, total_mib=143_771.0, one_mib=1_600.0,
                      two_mib=3_100.0)
    assert fused_size(busy, share=1.0, cap=64) == 1  # a card mostly taken: still one member


@pytest.mark.parametrize("memory", [
    FuseMemory(CPU),
    FuseMemory("card", free_mib=1e5, total_mib=1e5, one_mib=2_000.0, two_mib=2_000.0),
    FuseMemory("card", free_mib=1e5, total_mib=1e5, one_mib=2_000.0, two_mib=1_900.0),
])
def test_nothing_measured_means_one_member(memory: FuseMemory) -> None:
    assert fused_size(memory, share=1.0, cap=64) == 1


def test_a_measurement_round_trips_and_a_foreign_value_is_none() -> None:
    assert FuseMemory.from_plain(H200.to_plain()) == H200
    assert FuseMemory.from_plain(FuseMemory(CPU).to_plain()) == FuseMemory(CPU)
    for raw in (None, "x", {"device": 3}, {"device": "a", "one_mib": "many"},
                {"device": "a", "two_mib": True}):
        assert FuseMemory.from_plain(raw) is None


def test_the_probe_runs_a_fused_step_on_the_cpu_and_measures_nothing(
        sample_data_dir, tiny_encoder, tmp_path) -> None:
    """On the CPU the probe takes the same steps as on a GPU (one member, then two), writes
    nothing to the run's folder, and reports a CPU: K is 1."""
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", device="cpu")
    assert measure_fuse_memory(cfg) == FuseMemory(CPU)
    assert not (tmp_path / "run").exists()
    assert fuse_memory(cfg, {CPU: H200.to_plain()}) == FuseMemory(CPU)  # nothing looked up
    assert memory_key(cfg) == f"{tiny_encoder}|{cfg.max_seq_len}|16|fp32"


def test_the_longest_batch_has_the_most_tokens(sample_data_dir, tiny_encoder, tmp_path) -> None:
    run = set_up(run_config(sample_data_dir, tiny_encoder, tmp_path / "run", device="cpu"))
    task, indices = longest_batch(run.plans[1], run.data)
    tokens = {(name, tuple(ix)): len(ix) * max(run.data[name].train[int(i)]["length"]
                                               for i in ix)
              for name, ix in run.plans[1]}
    assert tokens[(task, tuple(indices))] == max(tokens.values())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_probe_measures_what_a_member_costs(sample_data_dir, tiny_encoder,
                                                   tmp_path) -> None:
    """On a real card: a second member costs memory, the numbers are the card's, a stored
    measurement for this card is used as it is, and K fits the free memory."""
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", device="cuda")
    got = measure_fuse_memory(cfg)
    name = torch.cuda.get_device_name()
    assert got.device == name
    assert got.total_mib == torch.cuda.get_device_properties(0).total_memory / 2**20
    assert got.one_mib is not None and got.two_mib is not None and got.free_mib is not None
    assert 0 < got.one_mib < got.two_mib < got.free_mib <= got.total_mib
    k = fused_size(got, share=1.0, cap=10**6)
    assert k > 1 and k * (got.two_mib - got.one_mib) <= got.free_mib
    stored = FuseMemory(name, 1.0, 2.0, 3.0, 4.0)
    assert fuse_memory(cfg, {name: stored.to_plain()}) == stored
