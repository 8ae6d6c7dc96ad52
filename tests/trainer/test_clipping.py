"""Gradient clipping and the loss weight: what each update logs, each clipping mode against a
restatement written here, and the runs in which the weight is clipped away."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tests.helpers import read_jsonl, run_config, train_tiny_run
from weightsearch.core.errors import ConfigError


def _losses(out):
    return [r["loss"] for r in read_jsonl(out / "steps.jsonl")]


def _central_rows(out, central="rte"):
    return [r for r in read_jsonl(out / "steps.jsonl") if r["task"] == central]


def test_each_update_logs_its_norm_and_whether_it_was_clipped(tiny_run):
    rows = read_jsonl(tiny_run.out / "steps.jsonl")
    assert rows and all(r["grad_norm"] > 0 for r in rows)
    for r in rows:
        assert r["grad_norm_unweighted"] == pytest.approx(r["grad_norm"] / r["weight"])
        # torch's own rule: the factor is clip / (norm + 1e-6), at most 1
        expected = min(1.0, tiny_run.cfg.grad_clip / (r["grad_norm"] + 1e-6))
        assert r["clip_scale"] == pytest.approx(expected, rel=1e-5)
        assert r["clipped"] == (expected < 1.0)


def test_run_and_epochs_summarise_clipping_per_task(tiny_run):
    rows = read_jsonl(tiny_run.out / "steps.jsonl")
    summary = tiny_run.result.extra["clipping"]
    assert (summary["grad_clip"], summary["grad_clip_mode"]) == (1.0, "global")
    for task in ("rte", "mrpc", "stsb"):
        mine = [r for r in rows if r["task"] == task]
        norms = [r["grad_norm_unweighted"] for r in mine]
        got = summary["tasks"][task]
        assert got["updates"] == len(mine)
        assert got["clipped"] == sum(r["clipped"] for r in mine)
        assert got["clip_share"] == pytest.approx(got["clipped"] / len(mine))
        assert got["median_norm"] == pytest.approx(float(np.median(norms)))
        # In the weight the study sets (central 9, auxiliaries 1), which scales each update's
        # weight (the central task's off-focus updates train at 0.9): the value at which the
        # median update reaches the clip.
        nominal = 9.0 if task == "rte" else 1.0
        limits = [1.0 * nominal / r["grad_norm"] for r in mine]
        assert got["acts_below"] == pytest.approx(float(np.median(limits)))
    per_epoch = [h["clipping"]["rte"]["updates"] for h in tiny_run.result.history]
    assert sum(per_epoch) == summary["tasks"]["rte"]["updates"]


def test_the_live_range_per_focus_group_matches_the_logged_clip_factors(tiny_run):
    """Per task, the weight above which every in-focus (every off-focus) update is clipped,
    restated from steps.jsonl: an update applying weight a = f x w (f: 1 in focus, the
    off-focus factor otherwise) at pre-clip norm n is clipped at nominal weight v exactly when
    v x f x n / w > clip, so the group saturates above max(clip x w / n). At the run's own
    weight the logged flags agree: every update of a group clipped iff w is above its limit.
    And the applied norm is the logged norm times the logged factor."""
    rows = read_jsonl(tiny_run.out / "steps.jsonl")
    summary = tiny_run.result.extra["clipping"]["tasks"]
    for task in ("rte", "mrpc", "stsb"):
        nominal = 9.0 if task == "rte" else 1.0
        mine = [r for r in rows if r["task"] == task]
        got = summary[task]
        for in_focus, key in ((True, "saturates_in_focus"), (False, "saturates_off_focus")):
            group = [r for r in mine if (r["weight"] == nominal) == in_focus]
            if not group:
                assert got[key] is None
                continue
            limit = max(1.0 * nominal / r["grad_norm"] for r in group)
            assert got[key] == pytest.approx(limit)
            assert all(r["clipped"] for r in group) == (nominal > limit)
        both = [v for v in (got["saturates_in_focus"], got["saturates_off_focus"]) if v]
        assert got["saturates_at"] == pytest.approx(max(both))
        applied = [r["grad_norm"] * min(1.0, r["clip_scale"]) for r in mine]
        assert got["applied_norm"] == pytest.approx(float(np.mean(applied)))
    # SIWLM trains the central task off focus too (at a tenth of its weight): both groups.
    assert summary["rte"]["saturates_off_focus"] is not None
    assert summary["rte"]["saturates_off_focus"] > summary["rte"]["saturates_in_focus"]


@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_weights_clipped_away_train_the_same_run(sample_data_dir, tiny_encoder, tmp_path):
    """Global clipping at a norm every update exceeds: central weights 6 and 15 apply the
    same gradient at every update, so the runs are one (fp32, to rounding)."""
    runs = [train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / f"w{w}", grad_clip=1e-4,
                           weighting={"scheme": "siwlm", "central_weight": w, "focus_span": 2})
            for w in (6, 15)]
    for run in runs:
        assert run.result.extra["clipping"]["tasks"]["rte"]["clip_share"] == 1.0
    np.testing.assert_allclose(_losses(runs[0].out), _losses(runs[1].out), rtol=1e-4)
    a, b = (r.result.best for r in runs)
    for task in a:
        for metric in a[task]:
            # fp32 rounding of w x g differs by weight: equal to rounding, not to the bit
            assert a[task][metric] == pytest.approx(b[task][metric], rel=1e-3, abs=1e-4)
    weights = {r["weight"] for r in _central_rows(runs[1].out)}
    assert 15.0 in weights  # the weight was there, and clipped away


@pytest.mark.parametrize("extra", [{"grad_clip_mode": "unweighted", "grad_clip": 1e-4},
                                   {"grad_clip": 0}])
@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_without_weighted_clipping_the_weight_changes_the_run(sample_data_dir, tiny_encoder,
                                                              tmp_path, extra):
    runs = [train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / f"w{w}", **extra,
                           weighting={"scheme": "siwlm", "central_weight": w, "focus_span": 2})
            for w in (6, 15)]
    first, second = _losses(runs[0].out), _losses(runs[1].out)
    assert first[0] == pytest.approx(second[0])  # same start
    assert max(abs(x - y) for x, y in zip(first, second, strict=True)) > 1e-3
    if extra["grad_clip"] == 0:
        rows = read_jsonl(runs[0].out / "steps.jsonl")
        assert all(r["clip_scale"] == 1.0 and r["clipped"] is False for r in rows)
        assert runs[0].result.extra["clipping"]["tasks"]["rte"]["acts_below"] is None


def _one_update(run, task, restated_clip):
    """The trainer's update of `run` at the first batch of `task` that has its full weight,
    and the same update restated on a copy of the model: the gradient of the batch's plain
    loss, clipped and weighted as `restated_clip(grads, weight)` says, then the optimizer
    step. The weight, and the parameters after each."""
    from weightsearch.trainer.optim import build_optimizer
    from weightsearch.trainer.step import to_device, train_step

    step, indices = next((i, ix) for i, (t, ix) in enumerate(run.plans[1])
                         if t == task and run.scheme.weight(t, 1, i) > 1)
    weight = run.scheme.weight(task, 1, step)
    twin = copy.deepcopy(run.model)
    twin_opt = build_optimizer(twin, run.cfg, run.runtime.device, [])

    torch.manual_seed(5)
    train_step(run, 1, step, task, indices)

    torch.manual_seed(5)
    twin.train()
    data = run.data[task]
    batch = to_device(data.collate(data.train, indices, run.pad_id), run.runtime)
    loss = twin.head(task).loss(twin(task, batch).float(), batch)
    twin_opt.zero_grad(set_to_none=True)
    loss.backward()  # the unweighted gradient g
    params = [p for p in twin.parameters() if p.grad is not None]
    for p, g in zip(params, restated_clip([p.grad.clone() for p in params], weight),
                    strict=True):
        p.grad = g
    twin_opt.step()
    return weight, dict(run.model.named_parameters()), dict(twin.named_parameters())


def _norm(grads):
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))


@pytest.mark.parametrize("mode", ["global", "unweighted"])
def test_each_mode_matches_a_restatement(sample_data_dir, tiny_encoder, tmp_path, mode):
    """global: g_w = weight x g, clipped to c. unweighted: g clipped to c, times the weight."""
    from weightsearch.trainer.loop import set_up

    clip = 0.05
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", grad_clip=clip,
                     grad_clip_mode=mode, optimizer="adamw", warmup=0.0, lr=1e-3,
                     weighting={"scheme": "siwlm", "central_weight": 9, "focus_span": 2})
    run = set_up(cfg)
    run.model.train()
    initial = {k: v.detach().clone() for k, v in run.model.named_parameters()}

    def restated(grads, weight):
        if mode == "global":
            weighted = [weight * g for g in grads]
            factor = min(1.0, clip / (_norm(weighted) + 1e-6))
            return [g * factor for g in weighted]
        factor = min(1.0, clip / (_norm(grads) + 1e-6))
        return [weight * g * factor for g in grads]

    weight, trained, twin = _one_update(run, "rte", restated)
    assert weight == 9.0
    for name, p in trained.items():
        # A step moves a weight by up to lr = 1e-3. Where a gradient is near AdamW's eps,
        # rounding (and where clip_grad_norm_'s 1e-6 sits) moves a few weights by up to 2e-6.
        torch.testing.assert_close(p, twin[name], rtol=1e-5, atol=1e-5)
    assert any(not torch.equal(p, initial[k]) for k, p in trained.items())


def test_the_two_modes_differ_at_a_clipped_update(sample_data_dir, tiny_encoder, tmp_path):
    """The restatement is sharp: the two modes give different parameters at weight 9."""
    from weightsearch.trainer.loop import set_up
    from weightsearch.trainer.step import train_step

    after = {}
    for mode in ("global", "unweighted"):
        cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / mode, grad_clip=0.05,
                         grad_clip_mode=mode, optimizer="adamw", warmup=0.0, lr=1e-3,
                         weighting={"scheme": "siwlm", "central_weight": 9, "focus_span": 2})
        run = set_up(cfg)
        run.model.train()
        before = {k: v.clone() for k, v in run.model.state_dict().items()}
        step, (task, indices) = next((i, p) for i, p in enumerate(run.plans[1])
                                     if p[0] == "rte" and run.scheme.weight("rte", 1, i) > 1)
        torch.manual_seed(5)
        train_step(run, 1, step, task, indices)
        after[mode] = {k: v - before[k] for k, v in run.model.state_dict().items()}
    changes = [float((after["global"][k] - after["unweighted"][k]).abs().max())
               for k in after["global"]]
    assert max(changes) > 1e-4  # ten times what the restatement allows


@pytest.mark.parametrize(("extra", "needle"), [
    ({"grad_clip_mode": "per-task"}, "grad_clip_mode"),
    ({"grad_clip_mode": "unweighted", "grad_clip": 0}, "grad_clip above 0"),
])
def test_bad_clipping_settings_are_refused(sample_data_dir, tiny_encoder, tmp_path, extra,
                                           needle):
    with pytest.raises(ConfigError) as caught:
        run_config(sample_data_dir, tiny_encoder, tmp_path / "run", **extra)
    assert any(needle in p for p in caught.value.problems)
    assert not (tmp_path / "run").exists()


def test_default_mode_reads_as_before(sample_data_dir, tiny_encoder, tmp_path):
    """A run of the default mode digests as runs from before the setting, so they resume."""
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run")
    assert "grad_clip_mode" not in cfg.to_dict()
    other = run_config(sample_data_dir, tiny_encoder, tmp_path / "run",
                       grad_clip_mode="unweighted")
    assert other.to_dict()["grad_clip_mode"] == "unweighted"
    assert other.digest() != cfg.digest()


def test_updates_without_a_record_make_it_incomplete_and_a_nan_norm_counts():
    from weightsearch.trainer.clipping import clip_summary, reading_fields

    old = [{"task": "rte", "weight": 9.0, "skipped": False, "loss": 0.7}] * 3
    new = [{"task": "rte", "weight": 9.0, "skipped": False,
            **reading_fields({"skipped": False, "weight": 9.0}, norm, scale)}
           for norm, scale in ((20.0, 0.05), (float("nan"), float("nan")))]
    skipped = [{"task": "rte", "weight": 0.0, "skipped": True,
                **reading_fields({"skipped": True, "weight": 0.0}, float("nan"), float("nan"))}]
    got = clip_summary(old + new + skipped, 1.0, "global", {"rte": 9.0})["rte"]
    assert (got["updates"], got["clipped"], got["unrecorded"]) == (2, 2, 3)
    assert new[1]["clipped"] is True and skipped[0]["clipped"] is None


def test_smart_has_no_unweighted_gradient(sample_data_dir, tiny_encoder, tmp_path):
    with pytest.raises(ConfigError) as caught:
        run_config(sample_data_dir, tiny_encoder, tmp_path / "run", grad_clip_mode="unweighted",
                   adversarial={"enabled": True})
    assert any("SMART" in p for p in caught.value.problems)
    from weightsearch.trainer.clipping import reading_fields

    fields = reading_fields({"skipped": False, "weight": 9.0}, 4.0, 0.25,
                            weighted_task_gradient=False)
    assert fields["grad_norm_unweighted"] is None and fields["clipped"] is True
