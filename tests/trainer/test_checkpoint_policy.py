"""The `checkpoints` policy: what a finished run keeps on disk, and what still works after.

While a run trains it keeps what a resume needs; once it has finished (its result.json is
written) it keeps what its policy says: every epoch (all), the newest full checkpoints (last),
the final weights only (final), or only a record of the run (none)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.helpers import read_jsonl, run_config, train_tiny_run
from weightsearch.core.errors import ConfigError
from weightsearch.trainer.checkpoint import finish_checkpoints, latest_checkpoint


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, sample_data_dir, tiny_encoder):
    """A finished 2-epoch run that kept its last full checkpoint (checkpoints: last)."""
    out = tmp_path_factory.mktemp("full-run") / "run"
    return train_tiny_run(sample_data_dir, tiny_encoder, out, checkpoints="last")


def _layout(out: Path) -> dict[str, list[str]]:
    """Each checkpoint folder's file names, e.g. {"epoch-002": ["meta.json", ...]}."""
    root = out / "checkpoints"
    return {p.name: sorted(f.name for f in p.iterdir()) for p in sorted(root.iterdir())}


FULL = ["meta.json", "model.safetensors", "state.pt"]
KEPT = {
    "all": {"epoch-001": FULL, "epoch-002": FULL},
    "last": {"epoch-002": FULL},
    "final": {"epoch-002": ["meta.json", "model.safetensors"]},
    "none": {"epoch-002": ["meta.json"]},
}


@pytest.mark.slow
@pytest.mark.parametrize("policy", list(KEPT))
def test_a_finished_run_keeps_what_its_policy_says(policy, sample_data_dir, tiny_encoder,
                                                  tmp_path):
    run = train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / "run", checkpoints=policy)
    assert _layout(run.out) == KEPT[policy]
    newest = latest_checkpoint(run.out)
    assert newest is not None and newest.epoch == 2
    assert newest.has_weights == (policy != "none")
    # The record that stays still says what the run was: its history ends at the final epoch.
    assert newest.meta["history"][-1]["epoch"] == 2
    assert json.loads((run.out / "result.json").read_text())["history"] == run.result.history


def test_the_default_keeps_the_final_weights_and_trials_keep_none(sample_data_dir, tiny_encoder,
                                                                  tmp_path):
    from weightsearch.sweep.spec import load_study_spec

    assert run_config(sample_data_dir, tiny_encoder, tmp_path).checkpoints == "final"
    train = {"encoder": tiny_encoder, "data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"]}
    spec = load_study_spec({"study": "s", "train": train, "weights": [1, 9]})
    cell = spec.for_cell("rte", {"weighting.central_weight": 9}, 1, str(tmp_path / "c"))
    assert cell.checkpoints == "none"
    keeping = load_study_spec({"study": "s", "train": {**train, "checkpoints": "final"},
                               "weights": [1, 9]})
    assert keeping.for_cell("rte", {"weighting.central_weight": 9}, 1,
                            str(tmp_path / "c")).checkpoints == "final"


@pytest.mark.slow
def test_a_trimmed_run_resumed_again_is_done_not_retrained(sample_data_dir, tiny_encoder,
                                                          tmp_path):
    from weightsearch.trainer import train

    first = train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / "run", checkpoints="none")
    steps = (first.out / "steps.jsonl").read_text()
    again = train(first.cfg, resume=True, quiet=True)
    assert again.history == first.result.history
    assert (first.out / "steps.jsonl").read_text() == steps  # no update was trained again
    assert _layout(first.out) == KEPT["none"]
    # A changed setting is still refused: the record keeps what the run was trained with.
    with pytest.raises(ConfigError, match="lr"):
        train(run_config(sample_data_dir, tiny_encoder, first.out, checkpoints="none", lr=1e-3),
              resume=True, quiet=True)


@pytest.mark.slow
def test_an_interrupted_run_keeps_what_resume_needs_whatever_the_policy(
        sample_data_dir, tiny_encoder, tmp_path, tiny_run):
    from weightsearch.trainer import train

    class Stop(Exception):
        pass

    def stop_after_first_epoch(report):
        raise Stop

    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", checkpoints="none")
    with pytest.raises(Stop):
        train(cfg, report=stop_after_first_epoch, quiet=True)
    assert _layout(cfg_out := Path(cfg.output_dir)) == {"epoch-001": FULL}
    resumed = train(cfg, resume=True, quiet=True)
    assert resumed.history == tiny_run.result.history  # the same result as one straight run
    assert _layout(cfg_out) == KEPT["none"]


@pytest.mark.slow
def test_weights_of_a_run_without_them_are_refused_by_name(sample_data_dir, tiny_encoder,
                                                           tmp_path):
    from weightsearch.trainer import train

    bare = train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / "bare", checkpoints="none")
    kept = train_tiny_run(sample_data_dir, tiny_encoder, tmp_path / "kept", epochs=1)
    with pytest.raises(ConfigError, match=r"init_from: .*bare kept no model weights .*"
                                          r"checkpoints: final"):
        train(run_config(sample_data_dir, tiny_encoder, tmp_path / "next",
                         init_from=str(bare.out)), quiet=True)
    assert not (tmp_path / "next").exists()
    started = train(run_config(sample_data_dir, tiny_encoder, tmp_path / "next", epochs=1,
                               init_from=str(kept.out)), quiet=True)
    assert started.history  # a final-weights run starts the next one


def test_trimming_is_idempotent_and_safe_to_interrupt(full_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(full_run.out, out)
    weights = load_file(out / "checkpoints" / "epoch-002" / "model.safetensors")
    # Interrupted after meta.json says "weights" but before state.pt was removed: still intact.
    finish_checkpoints(out, "final")
    shutil.copy(full_run.out / "checkpoints" / "epoch-002" / "state.pt",
                out / "checkpoints" / "epoch-002" / "state.pt")
    ckpt = latest_checkpoint(out, warn=pytest.fail)
    assert ckpt is not None and ckpt.kept == "weights" and ckpt.has_weights
    finish_checkpoints(out, "final")
    finish_checkpoints(out, "final")
    assert _layout(out) == KEPT["final"]
    assert load_file(out / "checkpoints" / "epoch-002" / "model.safetensors").keys() \
        == weights.keys()
    finish_checkpoints(out, "none")
    finish_checkpoints(out, "final")  # weights once removed are not claimed back
    assert _layout(out) == KEPT["none"]
    assert latest_checkpoint(out, warn=pytest.fail).kept == "record"


def test_a_trimmed_checkpoint_missing_its_weights_file_is_damage(full_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(full_run.out, out)
    finish_checkpoints(out, "final")
    (out / "checkpoints" / "epoch-002" / "model.safetensors").unlink()
    warnings: list[str] = []
    assert latest_checkpoint(out, warn=warnings.append) is None
    assert "model.safetensors" in warnings[0] and "damaged" in warnings[0]


def test_unknown_policy_is_a_usage_error(sample_data_dir, tiny_encoder, tmp_path):
    with pytest.raises(ConfigError, match=r"checkpoints.*all, last, final, none"):
        run_config(sample_data_dir, tiny_encoder, tmp_path, checkpoints="some")


def test_earlier_attempts_checkpoints_go_once_a_later_one_has_trained(full_run, tmp_path):
    from weightsearch.sweep.trainable import (
        attempt_folder,
        drop_earlier_checkpoints,
        prepare_attempt,
    )

    base = str(tmp_path / "w9_s1")
    shutil.copytree(full_run.out, base)
    (Path(f"{attempt_folder(base, 1)}.copying-999") / "checkpoints").mkdir(parents=True)
    second = Path(prepare_attempt(base, 1))
    assert _layout(second) == _layout(full_run.out)  # the copy the next attempt starts from
    assert not list(tmp_path.glob("*.copying-*"))  # an interrupted copy is cleared first
    drop_earlier_checkpoints(base, 1)
    assert not (Path(base) / "checkpoints").exists()
    assert read_jsonl(Path(base) / "metrics.jsonl")  # the earlier attempt's logs stay
    assert (second / "checkpoints").is_dir()
