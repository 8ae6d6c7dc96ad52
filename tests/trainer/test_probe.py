"""The clipping probe a launch runs before a study's first cell: its norms are the run's own
first updates, its limit is restated here from them, and a run on either side of the limit
clips (or does not clip) as it says. The tests that train a run beside the probe, or probe
three times, are slow; the fast tier keeps one probe (its cap, and that it finds a limit)."""

from __future__ import annotations

import pytest

from tests.helpers import read_jsonl, run_config
from weightsearch.trainer import train
from weightsearch.trainer.probe import probe_clipping


def _central_rows(out):
    return [r for r in read_jsonl(out / "steps.jsonl") if r["task"] == "rte" and
            not r["skipped"]]


@pytest.mark.slow
def test_the_probe_reads_the_runs_first_central_updates(sample_data_dir, tiny_encoder,
                                                        tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1, log_every=1,
                     grad_clip=0.5, weighting={"scheme": "siwlm", "central_weight": 1,
                                               "focus_span": 2})
    probe = probe_clipping(cfg, central_updates=3)
    assert not (tmp_path / "run").exists()  # nothing written where the run would go
    train(cfg, quiet=True)
    rows = _central_rows(tmp_path / "run")
    first = [r["grad_norm_unweighted"] for r in rows[:3]]
    assert probe.central_updates == 3
    assert probe.smallest_norm == pytest.approx(min(first), rel=1e-5)
    # Restated: SIWLM's reference variant applies the central weight in focus (x1) and a tenth
    # of it elsewhere; every central update is clipped once even the smaller of the two,
    # times the smallest norm, exceeds the clip.
    assert {r["weight"] for r in rows} == {1.0, 0.1}  # both groups occur in the run
    assert probe.saturates_at == pytest.approx(0.5 / (min(first) * 0.1), rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("side", [0.8, 1.25])
def test_either_side_of_the_limit(sample_data_dir, tiny_encoder, tmp_path, side):
    """In focus only (off_focus 1: every central batch at the weight), a probe of the first
    central update; a run at 1.25 x its limit clips that update, at 0.8 x it does not. (Up to
    the first central update a run trains the same at any central weight.)"""
    weighting = {"scheme": "siwlm", "central_weight": 1, "focus_span": 2, "off_focus": 1}
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "p", epochs=1, log_every=1,
                     grad_clip=0.5, weighting=weighting)
    probe = probe_clipping(cfg, central_updates=1)
    at = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1, log_every=1,
                    grad_clip=0.5,
                    weighting={**weighting, "central_weight": side * probe.saturates_at})
    train(at, quiet=True)
    first = _central_rows(tmp_path / "run")[0]
    assert first["grad_norm_unweighted"] == pytest.approx(probe.smallest_norm, rel=1e-5)
    assert first["clipped"] is (side > 1)


@pytest.mark.slow
def test_where_a_clip_cannot_cut_the_weight_the_probe_finds_no_limit(sample_data_dir,
                                                                     tiny_encoder, tmp_path):
    for extra in ({"grad_clip": 0}, {"grad_clip_mode": "unweighted"}):
        cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1, **extra)
        probe = probe_clipping(cfg, central_updates=2)
        assert probe.central_updates == 2 and probe.saturates_at is None
    # SIWLM's paper variant trains focus batches at 1 whatever the weight: only off-focus
    # batches scale with it, so the limit is the off-focus one alone.
    paper = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1,
                       grad_clip=0.5, weighting={"scheme": "siwlm", "central_weight": 2,
                                                 "focus_span": 2, "variant": "paper"})
    probe = probe_clipping(paper, central_updates=3)
    assert probe.saturates_at == pytest.approx(0.5 / (probe.smallest_norm * 0.1), rel=1e-9)


def test_past_its_cap_the_probe_takes_the_central_tasks_batches_alone(sample_data_dir,
                                                                      tiny_encoder, tmp_path):
    """A small central task beside large auxiliary ones: its batches are rare in the first
    updates, so past `max_updates` the probe trains the central task's next batches only."""
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1, grad_clip=0.5)
    probe = probe_clipping(cfg, central_updates=3, max_updates=1)
    assert probe.central_updates == 3 and probe.updates <= 4
    assert probe.saturates_at is not None
