"""The settings reference (docs/settings.md) is the one its generator writes from the settings
declarations, every run-config setting says what it is, and what the declarations decide about
records and resumption (`omit_when`, `resume_free`, `since`) is what runs relied on before."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import pytest
import yaml

from tests.helpers import ROOT
from weightsearch.core.fields import DOC, Choice, Flag, Number, Text, drop_unrecorded, since
from weightsearch.trainer.config import RunConfig, load_config
from weightsearch.trainer.config.distill_settings import DistillSettings
from weightsearch.trainer.config.finetune_settings import FinetuneSettings
from weightsearch.trainer.config.optim_settings import AdamaxSettings
from weightsearch.trainer.mixture import MixtureSettings
from weightsearch.trainer.resume import RESUME_FREE, resume_settings
from weightsearch.trainer.smart import AdversarialSettings
from weightsearch.trainer.tasks import TaskSpec
from weightsearch.trainer.tracking import TrackingSettings

SCRIPT = ROOT / "scripts" / "settings_reference.py"
RELEASE_CONFIG = ROOT / "tests" / "compat" / "release-0.1.0" / "run" / "config.yaml"

spec = importlib.util.spec_from_file_location("settings_reference", SCRIPT)
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)

# The settings a run may resume with changed: they decide where it writes, how fast it runs and
# what it logs, not what it computes.
EXPECTED_RESUME_FREE = {"output_dir", "device", "num_threads", "cache_dir", "log_every",
                        "keep_checkpoints", "checkpoints", "stop_on_divergence", "tracking",
                        "recompute_activations", "pad_to", "pad_buckets", "cuda_graphs"}
# The settings a record leaves out at their default (tracking: while off), so that configs and
# digests of runs made before them read the same.
OMITTED_AT_DEFAULT = {"grad_clip_mode", "attention_dropout", "batches", "recompute_activations",
                      "tracking", "schedule", "adam_eps", "pad_to", "pad_buckets", "cuda_graphs",
                      "idle_params"}
AWAY_FROM_DEFAULT = {"grad_clip_mode": "unweighted", "attention_dropout": 0.0,
                     "batches": "fixed", "recompute_activations": True,
                     "schedule": "warmup_linear", "adam_eps": 1e-6,
                     "tracking": TrackingSettings(tensorboard=True), "pad_to": "buckets",
                     "pad_buckets": 8, "cuda_graphs": "off", "idle_params": "step"}


def test_the_committed_reference_is_the_generated_one():
    assert (ROOT / "docs" / "settings.md").read_text() == reference.render(), (
        "docs/settings.md is stale: run `python scripts/settings_reference.py`")


def test_check_exits_1_with_one_line_when_the_page_is_stale(tmp_path, monkeypatch, capsys):
    page = tmp_path / "settings.md"
    monkeypatch.setattr(reference, "OUTPUT", page)
    assert reference.main([]) == 0 and reference.main(["--check"]) == 0
    page.write_text(page.read_text().replace("| `epochs` |", "| `epoch` |"))
    assert reference.main(["--check"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "docs/settings.md is stale: run `python scripts/settings_reference.py`"]


@pytest.mark.parametrize("cls", [RunConfig, AdamaxSettings, FinetuneSettings, DistillSettings,
                                 TaskSpec, AdversarialSettings, MixtureSettings,
                                 TrackingSettings], ids=lambda c: c.__name__)
def test_every_setting_says_what_it_is_in_one_line(cls):
    for f in dataclasses.fields(cls):
        doc = f.metadata.get(DOC, "")
        assert doc.strip() and "\n" not in doc, f"{cls.__name__}.{f.name} has no doc"


def test_the_reference_covers_every_group_and_key():
    text = reference.render()
    for key in ("epochs", "adamax.eps", "finetune.adversarial.enabled", "tasks[].max_seq_len",
                "tracking.mlflow", "weighting.central_weight", "sampling.epoch_ends_with",
                "search.n_trials"):
        assert f"| `{key}` |" in text, key
    row = next(line for line in text.splitlines() if line.startswith("| `attention_dropout` |"))
    assert row.split(" | ")[1:5] == ["`float \\| None`", "`null`",
                                     "number in [0, 0.9], or null", "0.2.0"]


def test_rules_describe_what_they_accept():
    assert Number(integer=True, low=1).describe() == "integer >= 1"
    assert Number(integer=False, low=0, high=1, low_open=True,
                  optional=True).describe() == "number in (0, 1], or null"
    assert Number(integer=True, low=0, high=2**31 - 1).describe() == "integer in [0, 2147483647]"
    assert Number(integer=False, low=0, high=math.inf).describe() == "number >= 0"
    assert Choice(("a", "b"), optional=True).describe() == "a, b, or null"
    assert Flag().describe() == "true, false" and Text("a folder path").describe() == \
        "a folder path"


def test_the_resume_free_settings_are_those_declared_so():
    assert set(RESUME_FREE) == EXPECTED_RESUME_FREE


def test_a_resumed_run_compares_every_other_setting(sample_data_dir):
    cfg = load_config({"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"],
                       "tracking": {"tensorboard": False, "mlflow_experiment": "x"}})
    changed = cfg.replace(output_dir="/elsewhere", device="cpu", num_threads=2, log_every=7,
                          keep_checkpoints=3, checkpoints="all", stop_on_divergence=False,
                          recompute_activations=True, cache_dir="/cache",
                          tracking=TrackingSettings(tensorboard=True))
    assert resume_settings(changed) == resume_settings(cfg)
    assert resume_settings(cfg.replace(seed=2)) != resume_settings(cfg)


def test_a_record_leaves_out_newer_settings_at_their_default(sample_data_dir):
    cfg = load_config({"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"]})
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert names - set(cfg.to_dict()) == OMITTED_AT_DEFAULT
    for key, value in AWAY_FROM_DEFAULT.items():
        assert key in cfg.replace(**{key: value}).to_dict(), key
    # Tracking off is left out whatever its other settings say.
    off = cfg.replace(tracking=TrackingSettings(mlflow_experiment="x", mlflow_parent="p"))
    assert "tracking" not in off.to_dict() and off.digest() == cfg.digest()
    # SMART's `project` is left out while SMART is off, here and in the fine-tuning stage.
    ft = load_config({"data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"],
                      "finetune": {"tasks": ["rte"]}}).to_dict()
    assert "project" not in ft["adversarial"] and "project" not in ft["finetune"]["adversarial"]
    on = cfg.replace(adversarial=AdversarialSettings(enabled=True)).to_dict()
    assert on["adversarial"]["project"] is False


def test_since_says_which_settings_the_first_release_recorded():
    """Release 0.1.0's run config records every setting of that release, but tracking, which
    it too left out while off."""
    recorded = set(yaml.safe_load(RELEASE_CONFIG.read_text()))
    first = {f.name for f in dataclasses.fields(RunConfig) if since(f) == "0.1.0"}
    assert recorded == first - {"tracking"}
    assert {f.name for f in dataclasses.fields(RunConfig)} - first == \
        {"grad_clip_mode", "attention_dropout", "batches", "checkpoints", "stop_on_divergence",
         "recompute_activations", "schedule", "adam_eps", "pad_to", "pad_buckets",
         "cuda_graphs", "idle_params"}


def test_since_says_which_task_and_smart_settings_the_first_release_recorded():
    """Release 0.1.0's run config records every task setting and SMART setting of that
    release (SMART off); the rest appeared later."""
    release = yaml.safe_load(RELEASE_CONFIG.read_text())
    for cls, recorded in ((TaskSpec, release["tasks"][0]),
                          (AdversarialSettings, release["adversarial"])):
        first = {f.name for f in dataclasses.fields(cls) if since(f) == "0.1.0"}
        assert set(recorded) == first, cls.__name__
    later = {f"{cls.__name__}.{f.name}" for cls in (TaskSpec, AdversarialSettings,
                                                     MixtureSettings, TrackingSettings)
             for f in dataclasses.fields(cls) if since(f) != "0.1.0"}
    assert later == {"TaskSpec.max_train_examples", "TaskSpec.max_eval_examples",
                     "AdversarialSettings.project", "AdversarialSettings.ascent",
                     "MixtureSettings.gate",
                     "MixtureSettings.residual", "TrackingSettings.mlflow_parent"}


def test_the_declarations_leave_out_what_a_record_leaves_out(sample_data_dir):
    """A task without caps of its own, and SMART while off, record what 0.1.0 recorded."""
    assert "project" not in drop_unrecorded(AdversarialSettings(),
                                            dataclasses.asdict(AdversarialSettings()))
    on = AdversarialSettings(enabled=True)
    assert drop_unrecorded(on, dataclasses.asdict(on))["project"] is False
    assert drop_unrecorded(on, dataclasses.asdict(on))["ascent"] == "stable_kl"
    assert "ascent" not in drop_unrecorded(AdversarialSettings(),
                                           dataclasses.asdict(AdversarialSettings()))
    cfg = load_config({"data_dir": str(sample_data_dir), "tasks": [
        "rte", {"preset": "mrpc", "max_train_examples": 8, "max_eval_examples": 4}]})
    for task, recorded in zip(cfg.tasks, cfg.to_dict()["tasks"], strict=True):
        assert set(drop_unrecorded(task, dataclasses.asdict(task))) == set(recorded)
