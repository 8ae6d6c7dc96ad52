"""scripts/check_siwlm_steps.py: the independent SIWLM check passes real runs, catches tampering."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import CHECK_SIWLM_STEPS
from weightsearch.trainer import load_config, train

pytestmark = pytest.mark.slow  # every test here reads a real tiny run

spec = importlib.util.spec_from_file_location("check_siwlm_steps", CHECK_SIWLM_STEPS)
checker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(checker)


def _train(sample_data_dir, tiny_encoder, out: Path, variant: str) -> Path:
    cfg = load_config({
        "encoder": tiny_encoder, "data_dir": str(sample_data_dir),
        "tasks": ["mrpc", "rte", "stsb", "cola"], "central_task": "rte",
        "weighting": {"scheme": "siwlm", "central_weight": 9, "variant": variant,
                      "focus_span": 3, "aux_weights": {"cola": 2}},
        "epochs": 3, "batch_size": 16, "max_train_examples": 48, "max_eval_examples": 16,
        "output_dir": str(out), "log_every": 5, "precision": "fp32",
    })
    train(cfg, quiet=True)
    return out


@pytest.fixture(scope="module")
def runs(sample_data_dir, tiny_encoder, tmp_path_factory):
    """The run of each variant, trained once for the module: variant -> its folder."""
    trained: dict[str, Path] = {}

    def run(variant: str) -> Path:
        if variant not in trained:
            trained[variant] = _train(sample_data_dir, tiny_encoder,
                                      tmp_path_factory.mktemp(variant) / "run", variant)
        return trained[variant]

    return run


@pytest.mark.parametrize("variant", ["reference", "paper"])
def test_real_runs_match_the_rule(runs, capsys, variant):
    out = runs(variant)
    assert checker.main([str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["updates"] == 3 * 4 * 3 and summary["mismatches"] == 0
    weights = summary["updates_per_task_and_weight"]
    focus = 1 if variant == "paper" else 9
    assert weights[f"rte@{focus}"] > 0 and weights["rte@0.9"] > 0
    assert weights["cola@0.2"] > 0  # its own initial weight 2, off focus
    assert sum(weights.values()) == summary["updates"]


def test_a_tampered_weight_or_a_missing_update_is_caught(runs, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(runs("reference"), out)  # the reference run, to tamper with
    lines = (out / "steps.jsonl").read_text().splitlines()
    row = json.loads(lines[7])
    row["weight"] *= 2
    (out / "steps.jsonl").write_text("\n".join([*lines[:7], json.dumps(row), *lines[8:]]) + "\n")
    assert checker.main([str(out)]) == 1
    assert json.loads(capsys.readouterr().out)["mismatches"] == 1
    (out / "steps.jsonl").write_text("\n".join(lines[:7] + lines[8:]) + "\n")
    assert checker.main([str(out)]) == 1
    assert checker.main([str(tmp_path / "absent")]) == 2
    assert "give the output_dir" in capsys.readouterr().err
