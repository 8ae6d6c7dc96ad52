"""The learning-rate schedules and the Adam-type eps against restatements of the code they
follow: `linear` (the current MT-DNN code's and transformers' decay from the peak) and
`warmup_linear` (the SIWLM code's: pytorch-pretrained-bert 0.6.0's function, read by its Adamax
before it counts an update and by its RAdam after), and the batches `batches: fixed` cuts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from tests.helpers import run_config
from weightsearch.trainer import load_config
from weightsearch.trainer.finetune import stage_config
from weightsearch.trainer.optim import build_optimizer, build_scheduler


def _reference_warmup_linear(x: float, warmup: float) -> float:
    # pytorch_pretrained_bert/optimization.py, version 0.6.0, as the SIWLM code pins it.
    return x / warmup if x < warmup else 1.0 - x


def _one_weight_model(value: float) -> nn.Module:
    model = nn.Linear(1, 1, bias=False).double()
    model.weight.data.fill_(value)
    return model


def _train(cfg, total: int, grads: list[float]) -> list[float]:
    model = _one_weight_model(1.0)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    sched = build_scheduler(opt, total, cfg)
    seen = []
    for g in grads:
        model.weight.grad = torch.full_like(model.weight, g)
        opt.step()
        sched.step()
        seen.append(model.weight.item())
    return seen


def _grads(total: int) -> list[float]:
    return [math.sin(1.7 * k) * 0.3 + 0.05 for k in range(total)]


def test_siwlm_adamax_under_warmup_linear_moves_as_the_reference_optimizer(
        sample_data_dir, tiny_encoder, tmp_path):
    """The SIWLM code's Adamax (module/bert_optim.py) restated for one weight: BERT-style
    Adamax, decay added to the update, the rate warmup_linear(count / total) with the count read
    before the update is counted, so the first update moves nothing."""
    total, warmup, lr, wd, eps, b1, b2 = 20, 0.1, 0.01, 0.01, 1e-6, 0.9, 0.999
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", optimizer="adamax", lr=lr,
                     warmup=warmup, weight_decay=wd, schedule="warmup_linear",
                     adamax={"bias_correction": False, "eps": eps})
    grads = _grads(total)
    p, m, u, expected = 1.0, 0.0, 0.0, []
    for count, g in enumerate(grads):
        m = b1 * m + (1 - b1) * g
        u = max(b2 * u, abs(g) + eps)
        update = m / (u + eps) + wd * p
        p -= lr * _reference_warmup_linear(count / total, warmup) * update
        expected.append(p)
    assert _train(cfg, total, grads) == pytest.approx(expected, rel=0, abs=1e-12)
    assert expected[0] == 1.0  # the reference's first update runs at rate 0


def _reference_radam(grads: list[float], lr: float, wd: float, eps: float, warmup: float,
                     count_from: int = 1) -> list[float]:
    """The SIWLM code's RAdam (module/bert_optim.py) restated for one weight: the update
    counted before the rate is read (warmup_linear((count + 1) / total) at the update numbered
    from 0), its eps, and the decay taken after the step, from the moved weight."""
    b1, b2, total = 0.9, 0.999, len(grads)
    p, m, v, out = 1.0, 0.0, 0.0, []
    sma_max = 2 / (1 - b2) - 1
    for k, g in enumerate(grads):
        count = k + 1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        rate = lr * _reference_warmup_linear((k + count_from) / total, warmup)
        b2t = b2 ** count
        sma = sma_max - 2 * count * b2t / (1 - b2t)
        if sma >= 5:
            step = rate * math.sqrt((1 - b2t) * (sma - 4) / (sma_max - 4) * (sma - 2) / sma
                                    * sma_max / (sma_max - 2)) / (1 - b1 ** count)
            p -= step * m / (math.sqrt(v) + eps)
        else:
            p -= rate / (1 - b1 ** count) * m
        p -= wd * rate * p
        out.append(p)
    return out


def test_siwlm_radam_under_warmup_linear_with_its_eps_moves_as_the_reference_optimizer(
        sample_data_dir, tiny_encoder, tmp_path):
    total, warmup, lr = 40, 0.1, 5e-5
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", optimizer="radam", lr=lr,
                     warmup=warmup, weight_decay=0.0, schedule="warmup_linear", adam_eps=1e-6)
    grads = [g * 1e-4 for g in _grads(total)]  # at MiniLM's scale, where eps matters
    ours = _train(cfg, total, grads)
    assert ours == pytest.approx(_reference_radam(grads, lr, 0.0, 1e-6, warmup), rel=0,
                                 abs=1e-15)
    # Counting from 0, as its Adamax does, would be another schedule.
    shifted = _reference_radam(grads, lr, 0.0, 1e-6, warmup, count_from=0)
    assert abs(shifted[-1] - ours[-1]) > 1e-8
    # torch's 1e-8 moves it measurably further once the variance is tractable.
    far = _train(cfg.replace(adam_eps=1e-8), total, grads)
    assert abs(far[-1] - 1.0) > abs(ours[-1] - 1.0) * 1.01
    # torch takes the decay before the step, the reference after it: lr^2 * decay * step apart.
    decayed = _train(cfg.replace(weight_decay=0.01), total, grads)
    assert decayed == pytest.approx(_reference_radam(grads, lr, 0.01, 1e-6, warmup), rel=0,
                                    abs=1e-11)


def _rate_factors(cfg, total: int) -> list[float]:
    """Each update's learning rate over the peak, as the optimizer runs them."""
    opt = build_optimizer(_one_weight_model(1.0), cfg, torch.device("cpu"))
    sched = build_scheduler(opt, total, cfg)
    factors = []
    for _ in range(total):
        factors.append(opt.param_groups[0]["lr"] / cfg.learning_rate)
        opt.step()
        sched.step()
    return factors


def test_linear_schedule_decays_from_the_peak(sample_data_dir, tiny_encoder, tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", warmup=0.1)
    assert cfg.schedule == "linear"
    factors = _rate_factors(cfg, 20)
    # Two warm-up updates (1/2, 1), then from the peak down to 0 over the other 18.
    expected = [0.5, 1.0] + [(20 - k) / 18 for k in range(2, 20)]
    assert factors == pytest.approx(expected)


def test_warmup_linear_drops_below_the_peak_where_the_warmup_ends(sample_data_dir, tiny_encoder,
                                                                  tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", warmup=0.1,
                     schedule="warmup_linear")
    factors = _rate_factors(cfg, 100)
    assert factors[:11] == pytest.approx([k / 10 for k in range(10)] + [0.9])
    assert max(factors) == pytest.approx(0.9)  # never the peak itself
    assert factors[-1] == pytest.approx(0.01)


def test_the_siwlm_paper_preset_resolves_to_the_references_schedule_eps_and_batches(
        sample_data_dir):
    cfg = load_config({"preset": "siwlm-paper", "data_dir": str(sample_data_dir),
                       "tasks": ["rte", "mrpc"], "weighting": {"central_weight": 9}})
    recorded = cfg.to_dict()
    assert recorded["schedule"] == "warmup_linear" and recorded["adam_eps"] == 1e-6
    assert recorded["adamax"] == {"bias_correction": False, "eps": 1e-6}
    assert recorded["batches"] == "fixed" and recorded["length_bucketing"] is False
    finetune = stage_config(cfg, "rte", sample_data_dir)
    assert (finetune.optimizer, finetune.schedule, finetune.adam_eps) == (
        "radam", "warmup_linear", 1e-6)


def test_new_settings_at_their_defaults_leave_the_record_and_digest_as_before(sample_data_dir):
    cfg = load_config({"data_dir": str(sample_data_dir), "tasks": ["rte"]})
    recorded = cfg.to_dict()
    assert "schedule" not in recorded and "adam_eps" not in recorded
    assert recorded["length_bucketing"] is True


def test_fixed_batches_are_consecutive_unless_bucketing_is_asked_for(sample_data_dir):
    from types import SimpleNamespace

    import datasets

    from weightsearch.trainer.task_data import batch_plan

    fixed = load_config({"data_dir": str(sample_data_dir), "tasks": ["rte"], "batches": "fixed"})
    assert fixed.length_bucketing is False  # MT-DNN's batches, with no more than batches: fixed
    rng = np.random.default_rng(0)
    rows = datasets.Dataset.from_dict({"length": rng.integers(5, 120, size=200).tolist()})
    data = {"rte": SimpleNamespace(train=rows)}
    for _, batch in batch_plan(data, 16, 1, 1, fixed.length_bucketing, fixed=True):
        assert np.array_equal(batch, np.arange(batch[0], batch[0] + len(batch)))
    asked = load_config({"data_dir": str(sample_data_dir), "tasks": ["rte"], "batches": "fixed",
                         "length_bucketing": True})
    plan = batch_plan(data, 16, 1, 1, asked.length_bucketing, fixed=True)
    assert any(not np.array_equal(b, np.arange(b[0], b[0] + len(b))) for _, b in plan)


@pytest.mark.parametrize(("total", "warmup"), [(1000, 0.1), (25, 0.1), (35, 0.1), (45, 0.1)])
def test_linear_against_transformers_schedule_as_the_mt_dnn_code_calls_it(total, warmup):
    """The current MT-DNN code passes warmup x total updates, unrounded, to `transformers`'
    linear schedule. Ours warms up over round(warmup x total) updates, each at (k + 1) / n
    (docs/departures.md): where the product is whole the two differ only by that one-update
    shift of the warm-up; where it is not, the warm-up's length and the decay's denominator
    differ too, and the schedules' summed rate apart by the figures departures.md gives."""
    from transformers import get_linear_schedule_with_warmup

    from weightsearch.trainer.optim import schedule_factor

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=warmup * total,
                                            num_training_steps=total)
    ref = []
    for _ in range(total):
        ref.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    ours = [schedule_factor("linear", "adamax", k, total, warmup) for k in range(total)]
    n = round(warmup * total)
    if n == warmup * total:
        assert ours[:n - 1] == pytest.approx(ref[1:n])  # one update earlier in the warm-up
        assert ours[n:] == pytest.approx(ref[n:])  # the same decay
    else:
        assert ours[n:] != pytest.approx(ref[n:])
    ratio = sum(ours) / sum(ref)
    assert ratio == pytest.approx({1000: 1.002, 25: 1.085, 35: 1.060, 45: 1.046}[total],
                                  abs=5e-4)
