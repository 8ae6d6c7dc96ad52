"""Run-config validation: every problem at once, before anything loads or is written."""

from __future__ import annotations

import pytest

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.config import apply_overrides, load_config


def base(sample_data_dir, **extra):
    raw = {
        "data_dir": str(sample_data_dir),
        "tasks": ["rte", "mrpc"],
        "central_task": "rte",
        "weighting": {"scheme": "siwlm", "central_weight": 9},
    }
    raw.update(extra)
    return raw


def problems_of(raw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    return info.value.problems


def test_valid_config_orders_central_task_first(sample_data_dir):
    cfg = load_config(base(sample_data_dir, tasks=["mrpc", "stsb", "rte"]))
    assert cfg.task_names == ("rte", "mrpc", "stsb")
    assert cfg.weighting.central_weight == 9.0
    assert (cfg.epochs, cfg.batch_size, cfg.learning_rate, cfg.optimizer) == (5, 32, 2e-4, "adamax")
    assert (cfg.warmup, cfg.grad_clip, cfg.pooling) == (0.1, 1.0, "auto")


def test_every_problem_is_reported_at_once(sample_data_dir):
    raw = base(
        sample_data_dir,
        tasks=["rte", "mrpc", "nosuchtask"],
        central_task="qqp",
        weighting={"scheme": "siwlm", "central_weight": -1, "variant": "papr"},
        epochs=0,
        lr="fast",
        optimizer="sgd",
        pooling="max",
        bogus=1,
    )
    problems = problems_of(raw)
    text = "\n".join(problems)
    for needle in ("nosuchtask", "central_task", "central_weight", "variant", "epochs", "lr",
                   "optimizer", "bogus", "pooling: 'max' is not one of auto, pooler, cls, mean"):
        assert needle in text, f"{needle!r} missing from:\n{text}"
    assert len(problems) >= 9


@pytest.mark.parametrize(
    ("weight", "ok"),
    [(0, True), (9, True), (-1, False), (float("nan"), False), (float("inf"), False),
     ("nine", False), (True, False)],
)
def test_central_weight_values(sample_data_dir, weight, ok):
    raw = base(sample_data_dir, weighting={"scheme": "siwlm", "central_weight": weight})
    if ok:
        assert load_config(raw).weighting.central_weight == float(weight)
    else:
        assert any("central_weight" in p for p in problems_of(raw))


def test_missing_data_dir_and_encoder_are_named(sample_data_dir, tmp_path):
    problems = problems_of(
        base(sample_data_dir, data_dir=str(tmp_path / "nope"), encoder=str(tmp_path / "enc"))
    )
    assert any(p.startswith("data_dir:") and "does not exist" in p for p in problems)
    assert any(p.startswith("encoder:") and "does not exist" in p for p in problems)


def test_unknown_scheme_lists_the_known_ones(sample_data_dir):
    problems = problems_of(base(sample_data_dir, weighting={"scheme": "gradnorm"}))
    assert any("siwlm" in p and "equal" in p and "static" in p and "uncertainty" in p
               and "dwa" in p for p in problems)


def test_overrides_parse_yaml_values(sample_data_dir):
    raw = apply_overrides(base(sample_data_dir), ["epochs=3", "weighting.central_weight=12",
                                                  "tasks=[rte, stsb]"])
    cfg = load_config(raw)
    assert cfg.epochs == 3 and cfg.weighting.central_weight == 12.0
    assert cfg.task_names == ("rte", "stsb")
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["epochs"])
    # YAML 1.1 would read 1e-4 as a string; users write it that way.
    assert load_config(apply_overrides(base(sample_data_dir), ["lr=1e-4"])).lr == 1e-4


def test_scientific_notation_in_files(sample_data_dir, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(f"data_dir: {sample_data_dir}\ntasks: [rte]\nlr: 2e-4\n")
    assert load_config(path).lr == 2e-4


def test_yaml_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_text("tasks: [rte, mrpc\nepochs: 2\n")
    with pytest.raises(ConfigError, match="line"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_every_declared_setting_is_read_from_the_config(sample_data_dir):
    """`compile: true` used to be accepted and then dropped: every plain setting the run config
    declares with a rule is now read from the file, and a bad value is named."""
    cfg = load_config(base(sample_data_dir, compile=True, length_bucketing=False,
                           precision="FP32", train_fraction=0.5))
    assert (cfg.compile, cfg.length_bucketing, cfg.precision, cfg.train_fraction) == \
        (True, False, "fp32", 0.5)
    assert problems_of(base(sample_data_dir, compile="yes")) == \
        ["compile: expected true or false, got 'yes'"]
    assert problems_of(base(sample_data_dir, epochs=0, device="tpu")) == [
        "epochs: 0 is out of range; use a value >= 1",
        "device: 'tpu' is not one of auto, cpu, cuda, mps",
    ]
