"""The reference-faithful training options (AdamaxW with or without bias correction, head
initialisation, overlong: drop, eval length, task poolers), weight-0 batches, and what a resumed
run must match (settings, data files, precision)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from torch import nn

from tests.helpers import ROOT, read_jsonl, run_config
from weightsearch.core.errors import ConfigError
from weightsearch.trainer import load_config, train
from weightsearch.trainer.init_weights import init_head_weights
from weightsearch.trainer.optim import AdamaxW, build_optimizer


def test_adamaxw_first_step_matches_the_hand_computed_update():
    p0 = torch.tensor([1.0, -2.0, 0.5])
    g = torch.tensor([0.3, 0.0, -4.0])
    lr, wd, eps = 0.1, 0.01, 1e-8
    param = nn.Parameter(p0.clone())
    opt = AdamaxW([{"params": [param], "decoupled_weight_decay": wd}], lr=lr, eps=eps)
    param.grad = g.clone()
    opt.step()
    # Step 1: m = (1-b1) g, u = |g| + eps, step size lr / (1-b1): the Adamax move is
    # lr * g / (|g| + eps); the decay shrinks the weights by lr * wd first.
    expected = p0 * (1 - lr * wd) - lr * g / (g.abs() + eps)
    assert torch.allclose(param.detach(), expected, atol=1e-7)


def test_adamaxw_decay_does_not_pass_through_the_gradient_normalisation():
    # A zero gradient: plain Adamax with an L2 term would move the weight by a full lr step
    # (the L2 gradient divided by its own magnitude); decoupled decay shrinks it by lr * wd.
    param = nn.Parameter(torch.tensor([2.0]))
    opt = AdamaxW([{"params": [param], "decoupled_weight_decay": 0.01}], lr=0.1)
    param.grad = torch.zeros(1)
    opt.step()
    assert param.item() == pytest.approx(2.0 * (1 - 0.1 * 0.01), abs=1e-7)
    l2 = nn.Parameter(torch.tensor([2.0]))
    l2.grad = torch.zeros(1)
    torch_adamax = torch.optim.Adamax([l2], lr=0.1, weight_decay=0.01)
    torch_adamax.step()
    assert l2.item() == pytest.approx(1.9, abs=1e-6)  # why the L2 form crippled training


def test_adamaxw_without_bias_correction_follows_the_reference_formula_over_two_steps():
    # SIWLM's BERT-style Adamax: no bias correction, eps inside the max and in the denominator.
    p0 = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    g1 = torch.tensor([0.3, 0.0, -4.0, 1e-7], dtype=torch.float64)
    g2 = torch.tensor([-0.1, 0.2, -1.0, 0.0], dtype=torch.float64)
    lr, wd, eps, b1, b2 = 0.1, 0.01, 1e-6, 0.9, 0.999
    param = nn.Parameter(p0.clone())
    opt = AdamaxW([{"params": [param], "decoupled_weight_decay": wd}], lr=lr, eps=eps,
                  bias_correction=False)
    param.grad = g1.clone()
    opt.step()
    m1, u1 = (1 - b1) * g1, g1.abs() + eps
    p1 = p0 * (1 - lr * wd) - lr * m1 / (u1 + eps)  # a tenth of the corrected first step
    assert torch.allclose(param.detach(), p1, rtol=0, atol=1e-12)
    param.grad = g2.clone()
    opt.step()
    m2, u2 = b1 * m1 + (1 - b1) * g2, torch.maximum(b2 * u1, g2.abs() + eps)
    p2 = p1 * (1 - lr * wd) - lr * m2 / (u2 + eps)
    assert torch.allclose(param.detach(), p2, rtol=0, atol=1e-12)


def test_adamaxw_with_bias_correction_and_no_decay_is_torchs_adamax():
    torch.manual_seed(0)
    ours, theirs = (nn.Parameter(torch.randn(5, 3)) for _ in range(2))
    theirs.data.copy_(ours.data)
    opt_a = AdamaxW([ours], lr=0.05, eps=1e-8)
    opt_b = torch.optim.Adamax([theirs], lr=0.05, eps=1e-8)
    for _ in range(3):
        grad = torch.randn(5, 3)
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt_a.step()
        opt_b.step()
    assert torch.equal(ours.detach(), theirs.detach())


def test_adamaxw_groups_mix_both_forms_and_added_groups_get_the_defaults():
    a, b = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    opt = AdamaxW([{"params": [a], "bias_correction": False}], lr=0.1, weight_decay=0.5)
    opt.add_param_group({"params": [b], "bias_correction": True})
    assert opt.param_groups[1]["decoupled_weight_decay"] == 0.5
    assert [g["bias_correction"] for g in opt.param_groups] == [False, True]
    a.grad, b.grad = torch.ones(2), torch.ones(2)
    opt.step()
    # Same decay (0.95), then a full corrected step for b and a tenth of one for a.
    assert torch.allclose(a.detach(), torch.full((2,), 0.95 - 0.1 * 0.1), atol=1e-6)
    assert torch.allclose(b.detach(), torch.full((2,), 0.95 - 0.1), atol=1e-6)
    assert [g["params"][0] for g in opt.param_groups] == [a, b]  # group order kept
    again = AdamaxW([{"params": [a], "bias_correction": False}, {"params": [b]}], lr=0.1)
    again.load_state_dict(opt.state_dict())
    assert again.param_groups[0]["bias_correction"] is False


def test_run_config_passes_the_adamax_settings_to_the_optimizer(sample_data_dir, tiny_encoder,
                                                                tmp_path):
    from weightsearch.trainer.model import MTDNN, load_encoder

    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run",
                     adamax={"bias_correction": False, "eps": 1e-6})
    opt = build_optimizer(MTDNN(load_encoder(tiny_encoder, 1), cfg.tasks), cfg,
                          torch.device("cpu"))
    assert all(g["bias_correction"] is False and g["eps"] == 1e-6 for g in opt.param_groups)
    default = run_config(sample_data_dir, tiny_encoder, tmp_path / "run")
    assert default.adamax.bias_correction is True and default.adamax.eps == 1e-8


def test_head_init_normal_draws_head_and_task_pooler_weights_from_n_0_002(
        sample_data_dir, tiny_encoder, tmp_path):
    from weightsearch.trainer.model import MTDNN, load_encoder

    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", pooling="task-pooler")
    torch.manual_seed(0)
    model = MTDNN(load_encoder(tiny_encoder, 1), cfg.tasks, "task-pooler")
    encoder_before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    default_bias = model.heads["rte"].proj.bias.detach().clone()
    assert init_head_weights(model, "default") == 0
    assert torch.equal(model.heads["rte"].proj.bias, default_bias)
    assert init_head_weights(model, "normal") == 6  # 3 heads + 3 task poolers
    layers = [m for part in (model.heads, model.task_poolers) for m in part.modules()
              if isinstance(m, nn.Linear)]
    weights = torch.cat([m.weight.detach().flatten() for m in layers])
    assert all(torch.count_nonzero(m.bias) == 0 for m in layers)
    assert abs(weights.mean().item()) < 0.003 and 0.018 < weights.std().item() < 0.022
    assert weights.abs().max().item() < 0.02 * 6
    assert all(torch.equal(v, encoder_before[k]) for k, v in model.encoder.state_dict().items())


@pytest.mark.slow
def test_head_init_reaches_the_trained_model(sample_data_dir, tiny_encoder, tmp_path):
    # A vanishing learning rate keeps the initial head weights: zero biases under normal,
    # Kaiming-uniform ones (up to 1/sqrt(32)) under the default.
    biases = {}
    for scheme in ("normal", "default"):
        out = tmp_path / scheme
        train(run_config(sample_data_dir, tiny_encoder, out, epochs=1, lr=1e-12,
                         head_init=scheme), quiet=True)
        weights = load_file(out / "checkpoints" / "epoch-001" / "model.safetensors")
        biases[scheme] = weights["heads.rte.proj.bias"].abs().max().item()
    assert biases["normal"] < 1e-9 < 0.01 < biases["default"]


def test_biases_and_layernorm_are_exempt_from_decay(sample_data_dir, tiny_encoder, tmp_path):
    from weightsearch.trainer.model import MTDNN, load_encoder

    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", weight_decay=0.01)
    model = MTDNN(load_encoder(tiny_encoder, 1), cfg.tasks)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    names = {id(p): n for n, p in model.named_parameters()}
    decayed, exempt = (opt.param_groups[i]["params"] for i in (0, 1))
    assert opt.param_groups[0]["decoupled_weight_decay"] == 0.01
    assert opt.param_groups[1]["decoupled_weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decayed)
    assert any("LayerNorm.weight" in names[id(p)] for p in exempt)
    assert any(names[id(p)].endswith(".bias") for p in exempt)
    assert not any("LayerNorm" in names[id(p)] or names[id(p)].endswith(".bias") for p in decayed)


def _rte_lengths(sample_data_dir, tiny_encoder, **options):
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.task_data import load_task_data
    from weightsearch.trainer.tasks import TASK_PRESETS

    tok = load_tokenizer(tiny_encoder)
    data = load_task_data(TASK_PRESETS["rte"], sample_data_dir, tok, 64, None, **options)
    return data


def test_overlong_drop_leaves_out_long_training_examples_and_counts_them(
        sample_data_dir, tiny_encoder):
    cut = _rte_lengths(sample_data_dir, tiny_encoder)
    dropped = _rte_lengths(sample_data_dir, tiny_encoder, overlong="drop", eval_max_seq_len=256)
    n_long = cut.truncated["train"]
    assert n_long > 0
    assert dropped.truncated["train"] == n_long
    assert len(dropped.train) == len(cut.train) - n_long
    assert max(dropped.train["length"]) <= 64 and max(cut.train["length"]) == 64
    # Dev examples keep up to eval_max_seq_len tokens; labels stay aligned with their texts.
    dev = dropped.evals["dev"]
    assert max(dev["length"]) > 64 and max(dev["length"]) <= 256
    kept = [i for i, n in enumerate(cut.train["length"]) if n < 64]
    assert [cut.train["label"][i] for i in kept] == [
        lab for lab, n in zip(dropped.train["label"], dropped.train["length"], strict=True)
        if n < 64]


@pytest.mark.slow
def test_task_poolers_are_per_task_and_train(sample_data_dir, tiny_encoder, tmp_path):
    from weightsearch.trainer.model import MTDNN, load_encoder

    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1,
                     pooling="task-pooler", overlong="drop", weight_decay=0.01)
    result = train(cfg, quiet=True)
    weights = load_file(tmp_path / "run" / "checkpoints" / "epoch-001" / "model.safetensors")
    names = {f"task_poolers.{t}.0.{p}" for t in ("rte", "mrpc", "stsb") for p in ("weight", "bias")}
    assert {k for k in weights if k.startswith("task_poolers.")} == names
    assert result.extra["pooling"] == "task-pooler"
    # The same start as the run (the loop seeds, then loads the encoder, then builds the model).
    torch.manual_seed(cfg.seed)
    fresh = MTDNN(load_encoder(tiny_encoder, cfg.seed), cfg.tasks, "task-pooler").state_dict()
    for name in names:  # every task's pooler moved away from its initial weights
        assert not torch.allclose(weights[name], fresh[name]), name
    # The encoder's own pooler gets no gradient, so neither an Adamax step nor decay moves it.
    assert torch.equal(weights["encoder.pooler.dense.weight"], fresh["encoder.pooler.dense.weight"])


@pytest.mark.slow
def test_weight_zero_batches_leave_parameters_and_optimizer_state_untouched(
        sample_data_dir, tiny_encoder, tmp_path):
    from weightsearch.trainer.model import MTDNN, load_encoder

    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1, weight_decay=0.01,
                     checkpoints="last", weighting={"scheme": "static", "weights": {"mrpc": 0}})
    train(cfg, quiet=True)
    steps = read_jsonl(tmp_path / "run" / "steps.jsonl")
    assert all(s["skipped"] == (s["task"] == "mrpc") for s in steps)
    torch.manual_seed(cfg.seed)
    model = MTDNN(load_encoder(tiny_encoder, cfg.seed), cfg.tasks)
    fresh = model.state_dict()
    ckpt = tmp_path / "run" / "checkpoints" / "epoch-001"
    trained = load_file(ckpt / "model.safetensors")
    # With decay on, a step on a zero-loss batch would still shrink the head's weights.
    for key in ("heads.mrpc.proj.weight", "heads.mrpc.proj.bias"):
        assert torch.equal(trained[key], fresh[key]), key
    assert not torch.equal(trained["heads.rte.proj.weight"], fresh["heads.rte.proj.weight"])
    state = torch.load(ckpt / "state.pt", weights_only=False)["optimizer"]
    index = {n: i for i, (n, _) in enumerate(
        [(n, p) for g in (0, 1) for n, p in _grouped(model, g)])}
    assert index["heads.mrpc.proj.weight"] not in state["state"]
    assert index["heads.rte.proj.weight"] in state["state"]


def _grouped(model, group):
    from weightsearch.trainer.optim import decay_groups

    params = decay_groups(model)[group]
    names = {id(p): n for n, p in model.named_parameters()}
    return [(names[id(p)], p) for p in params]


class _Stop(Exception):
    pass


def _stop_after_epoch_1(report):
    if report.epoch == 1:
        raise _Stop


@pytest.mark.slow
def test_resume_refuses_changed_data_and_names_the_settings(sample_data_dir, tiny_encoder,
                                                            tmp_path):
    data = tmp_path / "data"
    shutil.copytree(sample_data_dir, data)
    cfg = run_config(data, tiny_encoder, tmp_path / "run")
    with pytest.raises(_Stop):
        train(cfg, report=_stop_after_epoch_1, quiet=True)
    with pytest.raises(ConfigError, match=r"different settings \(lr\)"):
        train(cfg.replace(lr=1e-3), resume=True, quiet=True)
    with (data / "RTE" / "train.tsv").open("a") as f:
        f.write("9999\tAn added premise.\tAn added hypothesis.\tentailment\n")
    with pytest.raises(ConfigError, match="rte/train changed"):
        train(cfg, resume=True, quiet=True)


def test_resume_refuses_another_precision(sample_data_dir, tiny_encoder, tmp_path):
    from weightsearch.trainer.resume import resume_problems, resume_record

    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", precision="auto")
    meta = resume_record(cfg, "bf16")
    assert resume_problems(meta, cfg, "bf16", tmp_path) == []
    [problem] = resume_problems(meta, cfg, "fp32", tmp_path)
    assert "trained in bf16" in problem and "precision: bf16" in problem


def test_a_run_resumes_with_the_precision_that_auto_meant_where_it_started(
        sample_data_dir, tiny_encoder, tmp_path):
    """A run started with `auto` on a CPU without bf16 trained in fp32; on a machine where auto
    means bf16, naming fp32 (what the refusal asks for) continues it, and the reverse too."""
    from weightsearch.trainer.resume import resume_problems, resume_record

    auto = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", precision="auto")
    fp32 = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", precision="fp32")
    assert resume_problems(resume_record(auto, "fp32"), fp32, "fp32", tmp_path) == []
    assert resume_problems(resume_record(fp32, "fp32"), auto, "fp32", tmp_path) == []
    [problem] = resume_problems(resume_record(auto, "fp32"), auto, "bf16", tmp_path)
    assert "set precision: fp32 to continue it here" in problem
    lr = fp32.replace(lr=1e-3)  # a setting that does change the run is still named
    [problem] = resume_problems(resume_record(auto, "fp32"), lr, "fp32", tmp_path)
    assert "different settings (lr)" in problem


@pytest.mark.slow
def test_damaged_checkpoint_is_reported_and_an_older_one_used(sample_data_dir, tiny_encoder,
                                                              tmp_path, capsys):
    out = tmp_path / "run"
    cfg = run_config(sample_data_dir, tiny_encoder, out, epochs=3, keep_checkpoints=3)
    straight = train(run_config(sample_data_dir, tiny_encoder, tmp_path / "straight", epochs=3),
                     quiet=True)

    def stop_after_2(report):
        if report.epoch == 2:
            raise _Stop

    with pytest.raises(_Stop):
        train(cfg, report=stop_after_2, quiet=True)
    weights = out / "checkpoints" / "epoch-002" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated by a full disk, say
    got = train(cfg, resume=True, quiet=True)
    err = capsys.readouterr()
    assert str(weights) in err.out + err.err and "older checkpoint" in err.out + err.err
    assert got.final == straight.final  # epoch 2 retrained from epoch 1's checkpoint


def test_damaged_tokenized_cache_is_rebuilt(sample_data_dir, tiny_encoder, tmp_path, capsys):
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.task_data import load_task_data
    from weightsearch.trainer.tasks import TASK_PRESETS

    tok = load_tokenizer(tiny_encoder)
    load_task_data(TASK_PRESETS["mrpc"], sample_data_dir, tok, 64, tmp_path)
    arrow = next(p for p in tmp_path.glob("mrpc-train-*/*.arrow"))
    arrow.write_bytes(arrow.read_bytes()[:200])
    again = load_task_data(TASK_PRESETS["mrpc"], sample_data_dir, tok, 64, tmp_path)
    assert "damaged" in capsys.readouterr().out
    uncached = load_task_data(TASK_PRESETS["mrpc"], sample_data_dir, tok, 64, None)
    assert again.train["input_ids"] == uncached.train["input_ids"]


@pytest.mark.parametrize(("change", "needle"), [
    ({"max_seq_len": 512}, "max_seq_len: 512 exceeds the 256 positions"),
    ({"eval_max_seq_len": 1000}, "eval_max_seq_len: 1000 exceeds"),
    ({"overlong": "chop"}, "overlong: 'chop' is not one of truncate, drop"),
    ({"head_init": "xavier"}, "head_init: 'xavier' is not one of default, normal"),
    ({"adamax": {"eps": 0}}, r"adamax.eps: 0 is not a number in \(0, 1\]"),
    ({"adamax": {"bias_correction": "no"}}, "adamax.bias_correction: expected true or false"),
    ({"adamax": {"beta1": 0.8}}, "adamax.beta1: unknown setting"),
    ({"adamax": 1e-6}, "adamax: expected a mapping"),
])
def test_bad_length_settings_are_refused_before_writing(sample_data_dir, tiny_encoder, tmp_path,
                                                        change, needle):
    with pytest.raises(ConfigError, match=needle):
        train(run_config(sample_data_dir, tiny_encoder, tmp_path / "run", **change), quiet=True)
    assert not (tmp_path / "run").exists()


def test_output_dir_that_is_a_file_is_refused(sample_data_dir, tiny_encoder, tmp_path):
    target = tmp_path / "taken"
    target.write_text("not a folder")
    with pytest.raises(ConfigError, match="is a file"):
        train(run_config(sample_data_dir, tiny_encoder, target), quiet=True)
    assert target.read_text() == "not a folder"


def test_random_subsets_are_seeded_stable_and_independent_of_the_run_seed(sample_data_dir):
    from weightsearch.trainer import load_config, task_sizes
    from weightsearch.trainer.data.readers import resolve_path
    from weightsearch.trainer.task_rows import Subset, read_task_file
    from weightsearch.trainer.tasks import TASK_PRESETS

    rows = read_task_file(TASK_PRESETS["cola"], resolve_path(sample_data_dir, "CoLA/train.tsv"))
    a = Subset(n=50, random=True, seed=3).apply(rows)
    b = Subset(n=50, random=True, seed=3).apply(rows)
    c = Subset(n=50, random=True, seed=4).apply(rows)
    assert a.text_a == b.text_a and a.text_a != c.text_a and len(a) == 50
    assert a.text_a != rows.text_a[:50]  # not the first rows
    position = {t: i for i, t in enumerate(rows.text_a)}
    assert [position[t] for t in a.text_a] == sorted(position[t] for t in a.text_a)  # file order
    assert len(Subset(fraction=0.1, random=True).apply(rows)) == 30  # ceil(0.1 * 300)
    base = {"data_dir": str(sample_data_dir), "tasks": ["cola", "mrpc"], "train_fraction": 0.25}
    assert task_sizes(load_config(base)) == {"cola": 75, "mrpc": 75}  # both files hold 300 rows
    assert task_sizes(load_config({**base, "seed": 7})) == task_sizes(load_config(base))


def test_nested_subsets_are_a_ladder_and_random_ones_are_unchanged(sample_data_dir):
    import numpy as np

    from weightsearch.trainer.data.readers import resolve_path
    from weightsearch.trainer.task_rows import Subset, read_task_file
    from weightsearch.trainer.tasks import TASK_PRESETS

    rows = read_task_file(TASK_PRESETS["cola"], resolve_path(sample_data_dir, "CoLA/train.tsv"))
    ladder = [Subset(n=n, random=True, seed=5, nested=True).apply(rows) for n in (20, 80, 200)]
    for small, large in itertools.pairwise(ladder):
        assert set(small.text_a) < set(large.text_a)
    # The definition restated: the first n of one seeded permutation, in file order.
    first = np.sort(np.random.default_rng(5).permutation(len(rows))[:80])
    assert ladder[1].text_a == [rows.text_a[i] for i in first]
    # `random` keeps numpy's draw without replacement: existing studies keep their rows.
    drawn = np.sort(np.random.default_rng(5).choice(len(rows), size=80, replace=False))
    assert Subset(n=80, random=True, seed=5).apply(rows).text_a == [rows.text_a[i]
                                                                    for i in drawn]
    assert Subset(n=80, random=True, seed=5).key() != Subset(n=80, random=True, seed=5,
                                                             nested=True).key()


def test_rows_of_every_shape_take_nested_subsets():
    """Multiple-choice and span-QA rows (ColumnRows) draw a ladder like text pairs do."""
    from weightsearch.trainer.data.readers import ColumnRows
    from weightsearch.trainer.task_rows import Subset

    rows = ColumnRows(None, {"question": [f"q{i}" for i in range(100)], "id": list(range(100))})
    small, large = (Subset(n=n, random=True, seed=2, nested=True).apply(rows) for n in (10, 40))
    assert set(small.columns["id"]) < set(large.columns["id"]) and len(large) == 40
    assert len(Subset(n=10, random=True, seed=2).apply(rows)) == 10


def test_a_task_cap_of_its_own_wins_and_leaves_other_digests_alone(sample_data_dir, tmp_path):
    from weightsearch.trainer import load_config, task_sizes

    base = {"data_dir": str(sample_data_dir), "tasks": ["cola", "mrpc", "rte"],
            "output_dir": str(tmp_path),
            "max_train_examples": 40, "subsample": "nested"}
    plain = load_config(base)
    own = load_config({**base, "tasks": [{"name": "cola_big", "preset": "cola",
                                          "max_train_examples": 120}, "mrpc", "rte"]})
    assert task_sizes(own) == {"cola_big": 120, "mrpc": 40, "rte": 40}
    fraction = load_config({**base, "max_train_examples": None, "train_fraction": 0.1,
                            "tasks": [{"name": "cola", "preset": "cola",
                                       "max_train_examples": 17}, "mrpc"]})
    assert task_sizes(fraction) == {"cola": 17, "mrpc": 30}
    # A task without a cap reads as before tasks could have one (config.yaml and digests).
    assert all("max_train_examples" not in t for t in plain.to_dict()["tasks"])
    assert own.to_dict()["tasks"][0]["max_train_examples"] == 120
    assert load_config(own.to_dict()).digest() == own.digest()
    with pytest.raises(ConfigError, match=r"tasks\[0\]\.max_train_examples"):
        load_config({**base, "tasks": [{"name": "c", "preset": "cola",
                                        "max_train_examples": 0}]})


def test_a_task_dev_cap_of_its_own_wins(sample_data_dir, tiny_encoder, tmp_path):
    from weightsearch.trainer import load_config
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.run_data import load_data

    cfg = load_config({"data_dir": str(sample_data_dir), "encoder": tiny_encoder,
                       "output_dir": str(tmp_path), "max_train_examples": 8,
                       "max_eval_examples": 11,
                       "tasks": [{"name": "rte", "preset": "rte", "max_eval_examples": 7},
                                 "mrpc"]})
    data = load_data(cfg, load_tokenizer(cfg.encoder))
    assert len(data["rte"].evals["dev"]) == 7 and len(data["mrpc"].evals["dev"]) == 11
    assert cfg.to_dict()["tasks"][0]["max_eval_examples"] == 7
    assert "max_eval_examples" not in cfg.to_dict()["tasks"][1]


def test_ranking_subsets_keep_lists_whole():
    import numpy as np

    from weightsearch.trainer.data.readers import TaskRows

    groups = np.repeat(np.arange(20), 3)
    rows = TaskRows(None, [f"q{i}" for i in range(60)], [f"c{i}" for i in range(60)],
                    np.zeros(60, dtype=np.int64), groups)
    picked = rows.sample(10, seed=1)
    _, counts = np.unique(picked.groups, return_counts=True)
    assert len(picked) == 9 and set(counts) == {3}


@pytest.mark.parametrize(("change", "needle"), [
    ({"train_fraction": 0}, "train_fraction: 0 is out of range"),
    ({"train_fraction": 1.5}, "train_fraction: 1.5 is out of range"),
    ({"train_fraction": 0.5, "max_train_examples": 10}, "either train_fraction or max_train"),
    ({"subsample": "tail"}, "subsample: 'tail' is not one of random, nested, head"),
])
def test_bad_subset_settings(sample_data_dir, change, needle):
    from weightsearch.trainer import load_config

    with pytest.raises(ConfigError, match=needle):
        load_config({"data_dir": str(sample_data_dir), "tasks": ["rte"], **change})


def _bench_parity():
    spec = importlib.util.spec_from_file_location("bench_parity",
                                                  ROOT / "benchmarks" / "bench_parity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parity_benchmark_preset_variant_keeps_the_matched_settings(sample_data_dir):
    bench = _bench_parity()
    base, overrides, decay = bench.variant_config(["preset=siwlm-paper", "head_init=default"])
    cfg = load_config(dict(base, data_dir=str(sample_data_dir)), overrides=overrides)
    assert type(cfg.weighting).__name__ == "EqualSettings"  # not merged into SIWLM's
    assert (cfg.lr, cfg.epochs, cfg.max_seq_len, cfg.weight_decay) == (2e-4, 2, 128, 0.01)
    assert (cfg.overlong, cfg.eval_max_seq_len, cfg.finetune) == ("drop", 512, None)
    assert cfg.adamax.bias_correction is False and cfg.head_init == "default"
    assert decay is None and bench.variant_config(["bench.decay=l2"])[2] == "l2"


def test_radam_is_liu_et_al_s_rectified_adam():
    """Re-stated from Liu et al. (2020), Algorithm 2, for one scalar parameter: while the
    variance is not tractable (the first steps; the authors' code takes rho_t >= 5 where the
    paper writes rho_t > 4) the update is the bias-corrected momentum alone; after, it is
    scaled by the rectification term r_t."""
    import math

    import torch

    from weightsearch.trainer.config.optim_settings import OPTIMIZERS
    from weightsearch.trainer.optim import build_optimizer

    assert "radam" in OPTIMIZERS
    lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-8
    param = torch.nn.Parameter(torch.tensor([1.0]))
    model = torch.nn.Linear(1, 1, bias=False)
    model.weight = torch.nn.Parameter(param.detach().clone().view(1, 1))

    class Cfg:
        optimizer, weight_decay, adam_eps = "radam", 0.0, 1e-8

    Cfg.learning_rate = lr
    opt = build_optimizer(model, Cfg, torch.device("cpu"))
    theta, m, v = 1.0, 0.0, 0.0
    rho_inf = 2 / (1 - b2) - 1
    for t in range(1, 9):
        g = 2 * theta  # the gradient of theta^2
        opt.zero_grad()
        (model.weight ** 2).sum().backward()
        opt.step()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** t)
        rho = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        if rho > 5:
            r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
            theta -= lr * m_hat * r / (math.sqrt(v / (1 - b2 ** t)) + eps)
        else:
            theta -= lr * m_hat
        assert model.weight.item() == pytest.approx(theta, rel=1e-5), t


def _rte_run(sample_data_dir, tiny_encoder, tmp_path, max_seq_len: int) -> Path:
    config = tmp_path / f"run-{max_seq_len}.yaml"
    config.write_text(yaml.safe_dump({
        "encoder": tiny_encoder, "data_dir": str(sample_data_dir), "tasks": ["rte"],
        "epochs": 1, "batch_size": 16, "max_train_examples": 64, "max_eval_examples": 16,
        "max_seq_len": max_seq_len, "output_dir": str(tmp_path / f"out-{max_seq_len}")}))
    return config


@pytest.mark.slow
def test_dropping_by_default_warns_and_refuses_what_it_would_empty(
        sample_data_dir, tiny_encoder, tmp_path, capsys):
    """`overlong: drop` is the default: a task whose rows are mostly over the limit trains on
    the rest with a warning naming the fix; one with every row over it is refused (exit 2)
    before anything is written."""
    from weightsearch.cli import main

    assert main(["train", "--config", str(_rte_run(sample_data_dir, tiny_encoder, tmp_path, 40)),
                 "--quiet"]) == 0
    err = capsys.readouterr().err
    warning = next(line for line in err.splitlines() if "warning:" in line)
    dropped, total = (int(n) for n in re.findall(r"(\d+) of (\d+) training", warning)[0])
    assert total == 64 and 32 < dropped < 64 and "overlong: truncate" in warning
    report = json.loads((tmp_path / "out-40" / "data.json").read_text())
    assert report["train_sizes"]["rte"] == 64 - dropped

    assert main(["train", "--config", str(_rte_run(sample_data_dir, tiny_encoder, tmp_path, 8)),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "every example is longer than max_seq_len=8" in err and "overlong: truncate" in err
    assert "Traceback" not in err and not (tmp_path / "out-8").exists()


def _attention_kernels(encoder: nn.Module) -> set[str]:
    encoder.train()
    ids = torch.randint(1000, 2000, (4, 24))
    mask = torch.ones(4, 24, dtype=torch.long)
    mask[:, 18:] = 0
    with torch.profiler.profile() as prof:
        encoder(input_ids=ids, attention_mask=mask).last_hidden_state.sum().backward()
    return {e.name for e in prof.events() if "dot_product" in e.name}


def test_attention_dropout_zero_runs_the_fused_kernel_and_none_keeps_the_encoders(
        sample_data_dir, tiny_encoder, tmp_path):
    from weightsearch.trainer.model import load_encoder

    own = load_encoder(tiny_encoder, 1)
    assert own.config.attention_probs_dropout_prob == 0.1  # BERT's, which MT-DNN keeps
    assert "aten::_scaled_dot_product_attention_math" in _attention_kernels(own)
    fused = load_encoder(tiny_encoder, 1, 0.0)
    assert fused.config.attention_probs_dropout_prob == 0.0
    kernels = _attention_kernels(fused)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in kernels
    assert "aten::_scaled_dot_product_attention_math" not in kernels
    # Unset, the setting leaves the digest of configs as before it existed (runs resume).
    default = run_config(sample_data_dir, tiny_encoder, tmp_path / "a")
    assert "attention_dropout" not in default.to_dict()
    assert run_config(sample_data_dir, tiny_encoder, tmp_path / "a",
                      attention_dropout=0).to_dict()["attention_dropout"] == 0.0


@pytest.mark.parametrize("value", [-0.1, 1.0, "none", True])
def test_bad_attention_dropout_names_the_field(value, sample_data_dir, tiny_encoder, tmp_path):
    with pytest.raises(ConfigError) as info:
        run_config(sample_data_dir, tiny_encoder, tmp_path / "run", attention_dropout=value)
    assert [p.split(":")[0] for p in info.value.problems] == ["attention_dropout"]


def test_an_encoder_without_attention_dropout_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2Model

    from weightsearch.trainer.model import load_encoder

    folder = tmp_path / "gpt2ish"
    GPT2Model(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50)).save_pretrained(folder)
    with pytest.raises(ConfigError) as info:
        load_encoder(str(folder), 1, 0.0)
    assert info.value.problems[0].startswith("attention_dropout: the encoder ")


def test_bf16_autocast_keeps_attention_in_bf16_and_puts_the_flag_back():
    """PyTorch's math attention upcasts bf16 to fp32 unless bf16 reductions are allowed; the
    run's autocast allows them while it is on, so attention's saved tensors are bf16, and
    restores the process's setting after."""
    import torch.nn.functional as F

    from weightsearch.trainer.device import Runtime

    runtime = Runtime(torch.device("cpu"), torch.bfloat16)
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    saved: set[torch.dtype] = set()

    def pack(t):
        if t.dim() == 4 and t.shape[-1] == t.shape[-2] == 16:  # scores / probabilities
            saved.add(t.dtype)
        return t

    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), runtime.autocast():
        assert torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
        out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)  # the math path
    assert out.dtype == torch.bfloat16 and saved == {torch.bfloat16}
    assert torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed() == before
    out.float().sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
