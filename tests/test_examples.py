"""The shipped run examples load, and the two-stage and domain-adaptation ones run end to end
on the sample data with a tiny encoder."""

from __future__ import annotations

import pytest

from tests.helpers import EXAMPLES
from weightsearch.trainer import load_config, train


def _example(name, sample_data_dir, tiny_encoder, out, **sets):
    overrides = [f"data_dir={sample_data_dir}", f"encoder={tiny_encoder}", f"output_dir={out}",
                 "max_train_examples=48", "max_eval_examples=24", "max_seq_len=64",
                 "eval_max_seq_len=64", "epochs=1", "device=cpu"]
    overrides += [f"{k}={v}" for k, v in sets.items()]
    return load_config(EXAMPLES / name, overrides)


@pytest.mark.parametrize("name", ["run-sample.yaml", "run-siwlm-paper.yaml",
                                  "distill-teacher.yaml", "distill-student.yaml"])
def test_run_examples_load(name, sample_data_dir, tiny_encoder, tmp_path):
    assert _example(name, sample_data_dir, tiny_encoder, tmp_path / "x").tasks


def test_finetuned_study_example_loads():
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec(EXAMPLES / "study-finetuned-sample.yaml")
    assert spec.objective.stage == "finetuned" and spec.central_tasks == ("sst2", "stsb")


def test_ladder_study_example_trains_one_size_beside_the_auxiliaries(sample_data_dir):
    from weightsearch.sweep.spec import load_study_spec
    from weightsearch.trainer import task_sizes
    from weightsearch.trainer.tasks import dataset_name

    spec = load_study_spec(EXAMPLES / "study-sst2-ladder.yaml",
                           overrides=[f"train.data_dir={sample_data_dir}"])
    assert spec.central_tasks == ("sst2_125", "sst2_700", "sst2_4000")
    assert spec.seeds == (1, 2, 3) and spec.space.dims[0].values == (1, 3, 6, 9, 12, 15)
    cfg = spec.for_cell("sst2_125", {"weighting.central_weight": 6}, 2, "/tmp/unused")
    assert [t.name for t in cfg.tasks] == ["sst2_125", "rte", "mrpc", "stsb", "cola"]
    assert {dataset_name(t) for t in cfg.tasks} == {"sst2", "rte", "mrpc", "stsb", "cola"}
    # The shipped sample holds 300 rows per task: the 125 are a nested draw, the rest all of it.
    assert task_sizes(cfg) == {"sst2_125": 125, "rte": 300, "mrpc": 300, "stsb": 300,
                               "cola": 300}
    assert cfg.subsample == "nested" and cfg.task("rte").max_eval_examples == 300


@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_siwlm_paper_example_runs_both_stages(sample_data_dir, tiny_encoder, tmp_path):
    cfg = _example("run-siwlm-paper.yaml", sample_data_dir, tiny_encoder, tmp_path / "paper",
                   **{"finetune.epochs": 1})
    result = train(cfg, quiet=True)
    assert set(result.best) == {"rte", "mrpc", "stsb", "cola"}
    assert set(result.finetuned) == {"rte"}
    assert 0 <= result.stage_best("finetuned")["rte"]["accuracy"] <= 1


@pytest.mark.slow
def test_domain_adaptation_example_starts_from_the_source_run(sample_data_dir, tiny_encoder,
                                                              tmp_path):
    source = tmp_path / "source"
    train(load_config({"data_dir": str(sample_data_dir), "encoder": tiny_encoder,
                       "tasks": ["mrpc", "stsb"], "epochs": 1, "max_train_examples": 32,
                       "max_eval_examples": 16, "output_dir": str(source)}), quiet=True)
    sizes = []
    for fraction in (0.01, 1.0):
        cfg = _example("domain-adaptation.yaml", sample_data_dir, tiny_encoder,
                       tmp_path / f"rte-{fraction}", init_from=str(source),
                       train_fraction=fraction, max_train_examples="null")
        result = train(cfg, quiet=True)
        # The rows drawn: those trained plus the over-long ones (dropped by default).
        sizes.append(result.train_sizes["rte"] + result.truncated["rte"]["train"])
    assert sizes == [3, 300]  # ceil(1% of 300), all 300


def test_budget_glue_example_loads_every_group(sample_data_dir):
    from weightsearch.studies import schema as S
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec(EXAMPLES / "study-budget-glue.yaml",
                           overrides=[f"train.data_dir={sample_data_dir}"])
    assert spec.central_tasks == (S.GROUPS_STUDY,) and spec.tasks == ("rte", "mrpc", "stsb",
                                                                      "cola")
    assert len(spec.space.grid(S.GROUPS_STUDY)) == 15 and spec.seeds == (1,)


@pytest.mark.integration
def test_budget_sample_study_runs_and_inspect_prints_the_table(sample_data_dir, tiny_encoder,
                                                               tmp_path, capsys):
    """The shipped budgeted-grouping example end to end on Ray: its 15 networks (tiny encoder,
    48 rows, one epoch: CI time), then `inspect` through the command line."""
    from weightsearch.cli import main
    from weightsearch.studies import schema as S
    from weightsearch.sweep.spec import load_study_spec

    url = f"sqlite:///{tmp_path / 'budget.db'}"
    spec = load_study_spec(EXAMPLES / "study-budget-sample.yaml", overrides=[
        f"storage={url}", f"workdir={tmp_path / 'runs'}", f"train.encoder={tiny_encoder}",
        "train.max_train_examples=48", "train.max_eval_examples=24", "train.max_seq_len=64",
        "train.epochs=1", "train.device=cpu"])
    assert spec.central_tasks == (S.GROUPS_STUDY,) and spec.space.size(S.GROUPS_STUDY) == 15
    summary = _launch_on_two_cpus(spec)
    assert summary.finished and summary.ran == 15 and summary.failed == 0
    import optuna

    study = optuna.load_study(study_name="budget-sample/groups", storage=url)
    primary = study.user_attrs[S.A_GROUP_METRICS]
    assert list(primary) == ["sst2", "mrpc", "stsb", "cola"]
    groups = set()
    for t in study.get_trials():  # every task of the network scored; value: their mean
        group = t.user_attrs[S.T_POINT]["tasks"]
        groups.add(tuple(group))
        metrics = t.user_attrs[S.T_METRICS]
        assert set(metrics) == set(group) and t.user_attrs[S.T_GROUP] == group
        mean = sum(metrics[task][primary[task]] for task in group) / len(group)
        assert t.value == pytest.approx(mean)
    assert len(groups) == 15
    capsys.readouterr()
    assert main(["inspect", "budget-sample", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "networks per budget" in out and "single run" in out
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (
        ["1"], ["2"], ["3"], ["4"], ["singles"], ["all"])]
    assert [r[0] for r in rows][-6:] == ["1", "2", "3", "4", "singles", "all"]
    totals = [float(r[-2]) for r in rows[-6:-2]]
    assert totals == sorted(totals)  # a larger budget never scores less


@pytest.mark.integration
def test_methods_sample_study_runs_and_inspect_compares_the_methods(tiny_encoder, tmp_path,
                                                                      capsys):
    """The shipped methods example end to end on Ray (tiny encoder, 32 rows: CI time): every
    method with the same seeds, a central weight for SIWLM's trials only, DWA's weights moving
    in the third epoch, and `inspect`'s compute-fair table, CSV and plot."""
    import json
    from pathlib import Path

    import optuna

    from tests.helpers import read_jsonl
    from weightsearch.cli import main
    from weightsearch.studies import schema as S
    from weightsearch.sweep.spec import load_study_spec

    url = f"sqlite:///{tmp_path / 'methods.db'}"
    spec = load_study_spec(EXAMPLES / "study-methods-sample.yaml", overrides=[
        f"storage={url}", f"workdir={tmp_path / 'runs'}", f"train.encoder={tiny_encoder}",
        "train.max_train_examples=32", "train.max_eval_examples=24", "train.max_seq_len=64",
        "train.device=cpu"])
    assert spec.space.size("sst2") == 10 and spec.epochs == 3
    summary = _launch_on_two_cpus(spec)
    assert summary.finished and summary.ran == 20 and summary.failed == 0
    trials = optuna.load_study(study_name="methods-sample/sst2", storage=url).get_trials()
    seen = set()
    for t in trials:
        point = t.user_attrs[S.T_POINT]
        scheme = point["weighting.scheme"]
        assert (S.PARAM in t.params) == (scheme == "siwlm")
        assert t.user_attrs[S.T_EPOCHS] == 3
        seen.add((scheme, point.get("weighting.central_weight"), point["sampling.scheme"],
                  t.user_attrs[S.T_SEED]))
        if scheme == "dwa":  # weights of 1 for two epochs, then the loss ratios' softmax
            steps = read_jsonl(Path(t.user_attrs["output_dir"]) / "steps.jsonl")
            assert {s["weight"] for s in steps if s["epoch"] < 3} == {1.0}
            assert {round(s["weight"], 6) for s in steps if s["epoch"] == 3} != {1.0}
    assert len(seen) == 20  # (2 siwlm weights + 3 schemes) x 2 samplings x 2 seeds
    capsys.readouterr()
    assert main(["inspect", "methods-sample", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "methods for sst2, compute-fair" in out and "search (w per seed:" in out
    assert main(["inspect", "methods-sample", "--storage", url, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["central_tasks"][0]["methods"]
    assert len(rows) == 2 * (2 + 3)  # per sampling: siwlm in-sample and search, 3 schemes
    assert sum(r["best"] for r in rows) == 1
    per_seed = {r["method"]: r["per_seed"] for r in rows}
    assert per_seed["weighting.scheme=siwlm sampling.scheme=sqrt"] == 6  # 2 weights x 3 epochs
    assert per_seed["weighting.scheme=dwa sampling.scheme=sqrt"] == 3
    plot = tmp_path / "methods.png"
    assert main(["inspect", "methods-sample", "--storage", url, "--plot", str(plot)]) == 0
    assert plot.stat().st_size > 10_000


def _launch_on_two_cpus(spec):
    import ray

    from weightsearch.sweep.launch import launch

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        return launch(spec, progress=False)
    finally:
        ray.shutdown()


def test_rate_ladder_example_moves_the_weight_to_the_sampling_rate(sample_data_dir):
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec(EXAMPLES / "study-sst2-rate-ladder.yaml",
                           overrides=[f"train.data_dir={sample_data_dir}"])
    assert spec.weight_acts_on == "sampling" and spec.seeds == (1, 2, 3, 4)
    assert spec.space.dims[0].values == (1, 2, 4, 8, 15)
    cfg = spec.for_cell("sst2_700", {"weighting.central_weight": 8}, 2, "/tmp/unused")
    assert [t.name for t in cfg.tasks] == ["sst2_700", "rte", "mrpc", "stsb", "cola"]
    assert cfg.weighting.central_weight == 1.0 and dict(cfg.sampling.weights) == {"sst2_700": 8}
    assert cfg.sampling.epoch_ends_with == "sst2_700" and cfg.grad_clip == 1.0
