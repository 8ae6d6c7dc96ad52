"""The baselines beside SIWLM: uncertainty and DWA loss weighting, and the sampling rules by
size, against values worked out by hand from their definitions (the papers' formulas, written
out below), and their bad input."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from weightsearch.cli import main
from weightsearch.core.errors import ConfigError
from weightsearch.trainer.config import load_config
from weightsearch.trainer.optim import build_optimizer
from weightsearch.trainer.sampling import build_sampler, parse_sampling
from weightsearch.trainer.weighting import (
    DwaSettings,
    UncertaintySettings,
    build_scheme,
    parse_weighting,
)

TASKS = ("rte", "mrpc", "stsb")
TYPES = {"rte": "classification", "mrpc": "classification", "stsb": "regression"}


# --- DWA (Liu, Johns & Davison 2019, eq. 7) ----------------------------------------------------
# A hand-made history of epoch mean losses, and the weights worked out from
# w_k(t) = K exp(r_k(t-1)/T) / sum_i exp(r_i(t-1)/T), r_k(t-1) = L_k(t-1) / L_k(t-2), T = 2, K = 3.
LOSSES = {1: {"rte": 1.0, "mrpc": 0.8, "stsb": 2.0},
          2: {"rte": 0.5, "mrpc": 0.8, "stsb": 1.0},
          3: {"rte": 0.5, "mrpc": 0.4, "stsb": 1.5}}
E25, E50, E75 = 1.2840254166877414, 1.6487212707001282, 2.117000016612675  # exp(.25/.5/.75)
# Epoch 3: r = (0.5, 1.0, 0.5) -> exp(r/2) = (e^.25, e^.5, e^.25).
EPOCH3 = {"rte": 3 * E25 / (2 * E25 + E50), "mrpc": 3 * E50 / (2 * E25 + E50),
          "stsb": 3 * E25 / (2 * E25 + E50)}
# Epoch 4: r = (1.0, 0.5, 1.5) -> (e^.5, e^.25, e^.75).
EPOCH4 = {"rte": 3 * E50 / (E50 + E25 + E75), "mrpc": 3 * E25 / (E50 + E25 + E75),
          "stsb": 3 * E75 / (E50 + E25 + E75)}


def _dwa(**settings) -> object:
    scheme = build_scheme(DwaSettings(**settings), TASKS, "rte")
    for epoch, losses in LOSSES.items():
        scheme.end_epoch(epoch, losses)
    return scheme


def test_dwa_weights_of_a_hand_made_loss_history():
    scheme = _dwa()
    for epoch in (1, 2):  # w = 1 for the first two epochs
        assert [scheme.weight(t, epoch, 7) for t in TASKS] == [1.0, 1.0, 1.0]
    assert EPOCH3["rte"] == pytest.approx(0.913513, abs=1e-6)  # the arithmetic, once by hand
    for epoch, expected in ((3, EPOCH3), (4, EPOCH4)):
        got = {t: scheme.weight(t, epoch, 0) for t in TASKS}
        assert got == pytest.approx(expected, rel=1e-12)
        assert sum(got.values()) == pytest.approx(3)  # the weights sum to K
        # Constant over the epoch: the step does not matter.
        assert {t: scheme.weight(t, epoch, 999) for t in TASKS} == got


def test_dwa_temperature_and_undefined_ratios():
    # T = 1: epoch 3's r = (0.5, 1.0, 0.5) -> exp(r).
    scheme = _dwa(temperature=1)
    total = 2 * math.exp(0.5) + math.exp(1.0)
    assert scheme.weight("mrpc", 3, 0) == pytest.approx(3 * math.exp(1.0) / total)
    # A task with no batch in one of the two epochs (or a loss of 0 before) counts r = 1.
    scheme = build_scheme(DwaSettings(), TASKS, "rte")
    scheme.end_epoch(1, {"rte": 1.0, "mrpc": 0.0})
    scheme.end_epoch(2, {"rte": 2.0, "mrpc": 0.5, "stsb": 1.0})
    total = math.exp(1.0) + 2 * math.exp(0.5)
    assert scheme.weight("rte", 3, 0) == pytest.approx(3 * math.exp(1.0) / total)
    assert scheme.weight("mrpc", 3, 0) == scheme.weight("stsb", 3, 0)
    # A huge ratio does not overflow the softmax.
    scheme = build_scheme(DwaSettings(), TASKS, "rte")
    scheme.end_epoch(1, {"rte": 1e-300, "mrpc": 1.0, "stsb": 1.0})
    scheme.end_epoch(2, {"rte": 1.0, "mrpc": 1.0, "stsb": 1.0})
    assert scheme.weight("rte", 3, 0) == pytest.approx(3.0)
    # Weights of an epoch whose losses the loop never handed over are refused, not made up.
    with pytest.raises(ValueError, match="need the task losses of epoch 3"):
        build_scheme(DwaSettings(), TASKS, "rte").weight("rte", 4, 0)


# --- Uncertainty weighting (Kendall, Gal & Cipolla 2018) ----------------------------------------

def _uncertainty(lr=None):
    scheme = build_scheme(UncertaintySettings(lr=lr), TASKS, "rte")
    groups = scheme.setup(TYPES, torch.device("cpu"))
    return scheme, groups


def test_uncertainty_starts_at_zero_log_variance_with_the_papers_factors():
    scheme, groups = _uncertainty()
    (s,) = groups[0]["params"]
    assert s.tolist() == [0.0, 0.0, 0.0] and "lr" not in groups[0]
    # exp(-0) * c_t: 1 for classification, 1/2 for regression (the Gaussian likelihood).
    assert [scheme.weight(t, 1, 0) for t in TASKS] == [1.0, 1.0, 0.5]


def test_uncertainty_batch_loss_and_its_gradients_by_hand():
    scheme, groups = _uncertainty()
    (s,) = groups[0]["params"]
    # A batch of task t contributes exp(-s_t) c_t L_t + s_t / 2.
    # rte, s = 0, L = 2: 2; d/ds = -exp(-s) c L + 1/2 = -1.5.
    loss = torch.tensor(2.0, requires_grad=True)
    total = scheme.weighted_loss("rte", loss, scheme.weight("rte", 1, 0))
    total.backward()
    assert total.item() == pytest.approx(2.0)
    assert s.grad.tolist() == pytest.approx([-1.5, 0.0, 0.0])
    assert loss.grad.item() == pytest.approx(1.0)
    # stsb, s = -1, L = 2: 0.5 e^1 * 2 - 1/2 = e - 0.5; d/ds = -e + 0.5; the logged weight e/2.
    s.grad = None
    scheme.load_state_dict({"log_variance": torch.tensor([math.log(2.0), 0.0, -1.0])})
    assert scheme.weight("stsb", 2, 3) == pytest.approx(math.e / 2)
    assert scheme.weight("rte", 2, 3) == pytest.approx(0.5)
    total = scheme.weighted_loss("stsb", torch.tensor(2.0), scheme.weight("stsb", 2, 3))
    total.backward()
    assert total.item() == pytest.approx(math.e - 0.5, rel=1e-6)
    assert s.grad.tolist() == pytest.approx([0.0, 0.0, -math.e + 0.5], rel=1e-6)
    assert scheme.log_variances() == pytest.approx({"rte": math.log(2), "mrpc": 0, "stsb": -1})


def test_uncertainty_libmtl_form_restates_libmtls_uw():
    """LibMTL's UW (LibMTL/weighting/UW.py) for one task's batch: loss_scale s starts at -0.5 and
    the batch contributes L / (2 exp(s)) + s / 2, classification and regression alike."""
    problems: list[str] = []
    settings = parse_weighting({"scheme": "uncertainty", "form": "libmtl"}, problems)
    assert problems == [] and settings.form == "libmtl"
    scheme = build_scheme(settings, TASKS, "rte")
    (s,) = scheme.setup(TYPES, torch.device("cpu"))[0]["params"]
    assert s.tolist() == [-0.5, -0.5, -0.5]
    assert [scheme.weight(t, 1, 0) for t in TASKS] == pytest.approx([math.exp(0.5) / 2] * 3)
    for task, index in (("rte", 0), ("stsb", 2)):
        s.grad = None
        loss = 2.0
        total = scheme.weighted_loss(task, torch.tensor(loss), scheme.weight(task, 1, 0))
        total.backward()
        libmtl = loss / (2 * math.exp(-0.5)) + -0.5 / 2
        assert total.item() == pytest.approx(libmtl, rel=1e-6)
        # d/ds of L / (2 e^s) + s / 2 is -L / (2 e^s) + 1/2
        grad = [0.0, 0.0, 0.0]
        grad[index] = -loss / (2 * math.exp(-0.5)) + 0.5
        assert s.grad.tolist() == pytest.approx(grad, rel=1e-6)
    default = parse_weighting({"scheme": "uncertainty"}, problems)
    assert default.form == "kendall"
    bad: list[str] = []
    parse_weighting({"scheme": "uncertainty", "form": "LibMTL2"}, bad)
    assert len(bad) == 1 and "form" in bad[0] and "kendall" in bad[0]


def test_uncertainty_parameters_train_with_the_model_without_decay(sample_data_dir: Path):
    cfg = load_config({"data_dir": str(sample_data_dir), "tasks": list(TASKS),
                       "weighting": {"scheme": "uncertainty", "lr": 0.1},
                       "weight_decay": 0.5})
    scheme = build_scheme(cfg.weighting, cfg.task_names, cfg.central_task)
    groups = scheme.setup({t.name: t.type for t in cfg.tasks}, torch.device("cpu"))
    model = torch.nn.Linear(2, 2)
    optimizer = build_optimizer(model, cfg, torch.device("cpu"), groups)
    extra = optimizer.param_groups[-1]
    assert extra["params"] == groups[0]["params"]
    assert (extra["lr"], extra["decoupled_weight_decay"]) == (0.1, 0.0)
    assert optimizer.param_groups[0]["decoupled_weight_decay"] == 0.5
    # One Adamax step on a classification batch with L = 2 (gradient -1.5) raises s_rte by lr.
    scheme.weighted_loss("rte", torch.tensor(2.0), 1.0).backward()
    optimizer.step()
    assert scheme.log_variances()["rte"] == pytest.approx(0.1, rel=1e-4)
    assert scheme.log_variances()["stsb"] == 0.0


# --- Sampling rules by size -----------------------------------------------------------------
SIZES = {"rte": 4, "mrpc": 16, "stsb": 64}  # batches


def _sampler(raw):
    problems: list[str] = []
    settings = parse_sampling(raw, TASKS, problems)
    assert problems == [], problems
    return build_sampler(settings, TASKS)


@pytest.mark.parametrize(("raw", "expected"), [
    ({"scheme": "proportional"}, {"rte": 4 / 84, "mrpc": 16 / 84, "stsb": 64 / 84}),
    ({"scheme": "sqrt"}, {"rte": 2 / 14, "mrpc": 4 / 14, "stsb": 8 / 14}),  # sqrt: 2, 4, 8
    ({"scheme": "temperature", "T": 1}, {"rte": 4 / 84, "mrpc": 16 / 84, "stsb": 64 / 84}),
    ({"scheme": "temperature", "T": 2}, {"rte": 2 / 14, "mrpc": 4 / 14, "stsb": 8 / 14}),
    # cap 16: min(n, 16) = 4, 16, 16 -> ^(1/2) = 2, 4, 4.
    ({"scheme": "temperature", "T": 2, "cap": 16}, {"rte": 0.2, "mrpc": 0.4, "stsb": 0.4}),
    # T = 4: 4^(1/4) = sqrt 2, 16^(1/4) = 2, 64^(1/4) = 2 sqrt 2.
    ({"scheme": "temperature", "T": 4},
     {"rte": 2 ** 0.5 / (3 * 2 ** 0.5 + 2), "mrpc": 2 / (3 * 2 ** 0.5 + 2),
      "stsb": 2 * 2 ** 0.5 / (3 * 2 ** 0.5 + 2)}),
])
def test_sampling_probabilities_of_given_sizes(raw, expected):
    assert _sampler(raw).probabilities(SIZES) == pytest.approx(expected, rel=1e-12)


def _batches(sizes):
    return {task: [np.array([t * 1000 + i]) for i in range(n)]
            for t, (task, n) in enumerate(sizes.items())}


@pytest.mark.parametrize("raw", [{"scheme": "proportional"}, {"scheme": "sqrt"},
                                 {"scheme": "temperature", "T": 2, "cap": 16}])
def test_an_epoch_draws_as_many_updates_as_mt_dnn_with_the_probabilities(raw):
    sampler = _sampler(raw)
    p = sampler.probabilities(SIZES)
    counts: Counter = Counter()
    epochs = 300
    for epoch in range(1, epochs + 1):
        plan = sampler.order(_batches(SIZES), 5, epoch)
        assert len(plan) == sum(SIZES.values())  # compute-matched with a shuffled epoch
        counts.update(task for task, _ in plan)
    draws = epochs * sum(SIZES.values())
    for task in TASKS:  # within 4 standard deviations of the binomial count
        sd = math.sqrt(draws * p[task] * (1 - p[task]))
        assert abs(counts[task] - draws * p[task]) < 4 * sd, (task, counts[task], draws * p[task])


def test_a_small_task_drawn_often_goes_through_its_batches_in_whole_passes():
    plan = _sampler({"scheme": "temperature", "T": 100}).order(_batches(SIZES), 1, 1)
    rte = [int(b[0]) for task, b in plan if task == "rte"]
    assert len(rte) > 8  # near-uniform over 3 tasks: about 28 of 84 updates
    for start in range(0, len(rte) - 3, 4):
        assert sorted(rte[start:start + 4]) == [0, 1, 2, 3]  # each pass: every batch once


# UniMax (Chung et al. 2023, Algorithm 1), by hand. Budget = 2 + 10 + 100 = 112 batches.
# max_epochs 4: a (2): share 112/3 = 37.3 > 4*2 = 8 -> 8, left 104; b (10): 104/2 = 52 > 40 ->
# 40, left 64; c (100): 64/1 = 64 <= 400 -> 64.
# max_epochs 1: a: 2, left 110; b: 55 > 10 -> 10, left 100; c: 100.  (= one pass each)
# max_epochs 10: a: 37.3 > 20 -> 20, left 92; b: 46 <= 100 -> 46; c: 46.
# Fractional shares, budget 3 + 4 + 4 = 11, max_epochs 3: a: 11/3 <= 9 -> 3 2/3, left 7 1/3;
# b: 3 2/3, c: 3 2/3 -> whole batches 3, 3, 3 and the 2 left over to the two smallest ties:
# a (size 3) then b (size 4, first in config order): 4, 4, 3.
@pytest.mark.parametrize(("sizes", "max_epochs", "expected"), [
    ({"rte": 2, "mrpc": 10, "stsb": 100}, 4, {"rte": 8, "mrpc": 40, "stsb": 64}),
    ({"rte": 2, "mrpc": 10, "stsb": 100}, 1, {"rte": 2, "mrpc": 10, "stsb": 100}),
    ({"rte": 2, "mrpc": 10, "stsb": 100}, 10, {"rte": 20, "mrpc": 46, "stsb": 46}),
    ({"stsb": 100, "mrpc": 10, "rte": 2}, 4, {"rte": 8, "mrpc": 40, "stsb": 64}),  # any order
    ({"rte": 3, "mrpc": 4, "stsb": 4}, 3, {"rte": 4, "mrpc": 4, "stsb": 3}),
    ({"rte": 0, "mrpc": 5, "stsb": 7}, 2, {"rte": 0, "mrpc": 6, "stsb": 6}),
])
def test_unimax_allocation_by_hand(sizes, max_epochs, expected):
    sampler = _sampler({"scheme": "unimax", "max_epochs": max_epochs})
    assert sampler.counts(sizes) == expected
    plan = sampler.order(_batches(sizes), 3, 2)
    assert Counter(task for task, _ in plan) == Counter({t: n for t, n in expected.items() if n})
    assert len(plan) == sum(sizes.values())


def test_size_rules_are_seeded_by_seed_and_epoch():
    for raw in ({"scheme": "sqrt"}, {"scheme": "unimax", "max_epochs": 3}):
        sampler = _sampler(raw)
        plans = {(seed, epoch): [(t, int(b[0])) for t, b in
                                 sampler.order(_batches(SIZES), seed, epoch)]
                 for seed in (1, 2) for epoch in (1, 2)}
        assert len({tuple(p) for p in plans.values()}) == 4
        assert plans[1, 1] == [(t, int(b[0])) for t, b in
                               _sampler(raw).order(_batches(SIZES), 1, 1)]


# --- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "message"), [
    ({"scheme": "temperature", "T": 0},
     "sampling.T: must be a number > 0 (1 samples in proportion to size, larger flattens "
     "towards uniform), got 0"),
    ({"scheme": "temperature", "T": -1.5}, "sampling.T: must be a number > 0"),
    ({"scheme": "temperature", "T": "hot"}, "sampling.T: must be a number > 0"),
    ({"scheme": "temperature"}, "sampling.T: required for scheme 'temperature'"),
    ({"scheme": "temperature", "T": 2, "cap": 0},
     "sampling.cap: must be a number of batches >= 1 (T5's size limit K), or left out for no "
     "cap, got 0"),
    ({"scheme": "temperature", "T": 2, "cap": 0.5}, "sampling.cap: must be a number"),
    ({"scheme": "unimax", "max_epochs": 0},
     "sampling.max_epochs: must be a number >= 1 (the most passes over a task's batches in one "
     "epoch), got 0"),
    ({"scheme": "unimax", "max_epochs": True}, "sampling.max_epochs: must be a number >= 1"),
    ({"scheme": "unimax"}, "sampling.max_epochs: required for scheme 'unimax'"),
    ({"scheme": "sqrt", "T": 2}, "sampling.T: not a setting of scheme 'sqrt'"),
    ({"scheme": "unimx"}, "sampling.scheme: unknown scheme 'unimx'; choose one of"),
])
def test_bad_sampling_settings_name_the_field(raw, message):
    problems: list[str] = []
    assert parse_sampling(raw, TASKS, problems) is None
    assert len(problems) == 1 and problems[0].startswith(message), problems


@pytest.mark.parametrize(("raw", "message"), [
    ({"scheme": "uncertainty", "central_weight": 9},
     "weighting.central_weight: uncertainty weighting learns every task's weight, so it cannot "
     "take central_weight; leave central_weight out, or use scheme siwlm to set weights "
     "yourself"),
    ({"scheme": "uncertainty", "weights": {"rte": 2}},
     "weighting.weights: uncertainty weighting learns every task's weight"),
    ({"scheme": "uncertainty", "lr": 0}, "weighting.lr: must be a number > 0"),
    ({"scheme": "uncertainty", "lr": "fast"}, "weighting.lr: must be a number > 0"),
    ({"scheme": "dwa", "temperature": 0},
     "weighting.temperature: must be a number > 0 (Liu et al. use 2), got 0"),
    ({"scheme": "dwa", "temperature": float("inf")}, "weighting.temperature: must be"),
    ({"scheme": "dwa", "central_weight": 3}, "weighting.central_weight: not a setting of scheme "
                                             "'dwa'"),
    ({"scheme": "dwaa"}, "weighting.scheme: unknown scheme 'dwaa'; choose one of dwa, equal, "
                         "siwlm, static, uncertainty"),
])
def test_bad_weighting_settings_name_the_field(raw, message):
    problems: list[str] = []
    assert parse_weighting(raw, problems) is None
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_every_problem_at_once():
    problems: list[str] = []
    parse_weighting({"scheme": "uncertainty", "central_weight": 9, "lr": -1}, problems)
    assert [p.split(":")[0] for p in problems] == ["weighting.central_weight", "weighting.lr"]


@pytest.mark.parametrize(("override", "field"), [
    ("sampling.T=0", "sampling.T"),
    ("sampling.cap=0", "sampling.cap"),
    ("sampling={scheme: unimax, max_epochs: 0}", "sampling.max_epochs"),
    ("weighting.scheme=roundrobin", "weighting.scheme"),
    ("weighting={scheme: uncertainty, central_weight: 9}", "weighting.central_weight"),
])
def test_the_command_line_refuses_them_writing_nothing(override, field, sample_data_dir,
                                                       tmp_path, capsys):
    config = tmp_path / "run.yaml"
    out = tmp_path / "out"
    config.write_text(yaml.safe_dump({
        "data_dir": str(sample_data_dir), "tasks": list(TASKS), "output_dir": str(out),
        "sampling": {"scheme": "temperature", "T": 2}}))
    assert main(["train", "--config", str(config), "--set", override]) == 2
    err = capsys.readouterr().err
    assert f"{field}:" in err, err
    assert not out.exists()
    with pytest.raises(ConfigError):
        load_config(config, [override])


@pytest.mark.parametrize("scheme", ["uncertainty", "dwa"])
def test_a_central_weight_search_refuses_a_scheme_that_takes_none(scheme, sample_data_dir):
    from weightsearch.sweep.spec import load_study_spec

    with pytest.raises(ConfigError) as info:
        load_study_spec({"study": "baseline", "central_tasks": ["rte"],
                         "train": {"data_dir": str(sample_data_dir), "tasks": list(TASKS),
                                   "weighting": {"scheme": scheme}}})
    assert any(p.startswith("train.weighting: a weight search sweeps SIWLM's central weight; "
                            "use weighting: {scheme: siwlm, ...} or leave it out")
               for p in info.value.problems), info.value.problems


def test_a_study_compares_the_methods_with_the_same_seeds(sample_data_dir):
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec({
        "study": "methods", "central_tasks": ["rte"], "seeds": [1, 2],
        "train": {"data_dir": str(sample_data_dir), "tasks": list(TASKS),
                  "weighting": {"scheme": "equal"}},
        "search": {"strategy": "grid", "space": {
            "weighting.scheme": {"choices": ["equal", "uncertainty", "dwa"]},
            "sampling.scheme": {"choices": ["shuffle", "proportional", "sqrt"]}}}})
    points = spec.space.grid("rte")
    assert len(points) == 9
    seen = set()
    for point in points:
        for seed in (1, 2):
            cfg = spec.for_cell("rte", point, seed, "/tmp/unused")
            assert (cfg.weighting.scheme, cfg.sampling.scheme, cfg.seed) == (
                point["weighting.scheme"], point["sampling.scheme"], seed)
            seen.add((cfg.weighting.scheme, cfg.sampling.scheme))
    assert len(seen) == 9


def _row(family: str, regret: float, rules: dict, recommended: float, best: float) -> dict:
    return {"family": family, "regret": regret, "rule_regrets": rules,
            "recommended": recommended, "best_weight": best, "rule_in_sample": False}


def test_regret_comparison_counts_a_dataset_once_and_says_when_it_cannot_judge():
    """Means restated here; the bootstrap resamples datasets, so two sizes of one dataset move
    together; with fewer than three datasets there is no verdict."""
    import numpy as np

    from weightsearch.recommender.evaluation import regret_comparison

    rules = ("weight_1", "constant", "rule_of_thumb", "size_rule_refit", "nearest_neighbour")
    rows = [_row(f"d{i // 2}", 0.1 * i, {r: 0.1 * i + 0.5 + 0.1 * k for k, r in
                                         enumerate(rules)}, 2 + i, 3 + i) for i in range(8)]
    out = regret_comparison(rows)
    assert out["datasets"] == 4 and out["tasks"] == 8
    assert out["methods"]["recommender"]["mean"] == pytest.approx(np.mean([r["regret"]
                                                                           for r in rows]))
    assert out["edge"]["rule"] == "weight_1"  # the smallest regret among the rules
    assert out["edge"]["mean"] == pytest.approx(-0.5)
    assert out["verdict"] == "better" and out["edge"]["high90"] < 0
    assert out["spearman"]["mean"] == pytest.approx(1.0)
    # Equal regrets: no better. Two datasets: cannot judge.
    same = [{**r, "regret": r["rule_regrets"]["weight_1"]} for r in rows]
    assert regret_comparison(same)["verdict"] == "no better"
    assert regret_comparison(rows[:4])["verdict"] == "cannot judge"
    # The paper's rule is not the yardstick where it is scored on the paper's own tasks.
    inside = [{**r, "rule_in_sample": True,
               "rule_regrets": {**r["rule_regrets"], "rule_of_thumb": 0.0}} for r in rows]
    judged = regret_comparison(inside)
    assert judged["in_sample"] == ["rule_of_thumb"] and judged["edge"]["rule"] == "weight_1"
