"""Knowledge distillation: the loss, the soft-target builder on real teacher runs, the files'
checks, and the command that picks teachers and builds the targets."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from tests.helpers import read_jsonl, retrain_checkpoint, run_config
from weightsearch.cli import main
from weightsearch.core.errors import ConfigError
from weightsearch.trainer import train


@pytest.fixture(scope="module")
def teachers(sample_data_dir, tiny_encoder, tmp_path_factory):
    """Two finished teacher runs on rte and stsb (different seeds and dropout)."""
    root = tmp_path_factory.mktemp("teachers")
    runs = []
    for seed, dropout in ((1, 0.1), (2, 0.3)):
        out = root / f"t{seed}"
        train(run_config(sample_data_dir, tiny_encoder, out, epochs=1, seed=seed,
                         tasks=[{"preset": "rte", "dropout": dropout},
                                {"preset": "stsb", "dropout": dropout}]), quiet=True)
        runs.append(out)
    return runs


def test_distillation_loss_is_the_mean_of_hard_and_soft(sample_data_dir, tiny_encoder):
    from weightsearch.trainer.heads import build_head

    cfg = run_config(sample_data_dir, tiny_encoder, "unused")
    head = build_head(cfg.task("rte"), 32)
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.5]])
    soft = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    # by hand: -sum(q * log_softmax(z)) per row, averaged
    lse = math.log(math.exp(2.0) + math.exp(-1.0))
    row1 = -(0.9 * (2.0 - lse) + 0.1 * (-1.0 - lse))
    row2 = -(0.2 * math.log(0.5) + 0.8 * math.log(0.5))
    expected = (row1 + row2) / 2
    assert head.soft_loss(logits, soft).item() == pytest.approx(expected, rel=1e-6)
    reg = build_head(cfg.task("stsb"), 32)
    assert reg.soft_loss(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 2.5])).item() == (
        pytest.approx((1 + 0.25) / 2))


@pytest.mark.slow
def test_builder_averages_the_teachers(sample_data_dir, tiny_encoder, tmp_path, teachers):
    from weightsearch.trainer.model import MTDNN, load_encoder
    from weightsearch.trainer.task_data import collate

    student = run_config(sample_data_dir, tiny_encoder, tmp_path / "student", epochs=1,
                         cache_dir=str(tmp_path / "cache" / "tokenized"),
                         distill={"teachers": {"rte": [str(t) for t in teachers],
                                               "stsb": [str(t) for t in teachers]}})
    result = train(student, quiet=True)
    assert result.best["rte"]["accuracy"] >= 0
    files = sorted((tmp_path / "cache" / "soft-targets").glob("*.safetensors"))
    assert [f.name.split("-")[0] for f in files] == ["rte", "stsb"]

    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.run_data import load_data

    tokenizer = load_tokenizer(tiny_encoder)
    data = load_data(student, tokenizer)
    for file, task in zip(files, ("rte", "stsb"), strict=True):
        built = load_file(str(file))["targets"]
        ds = data[task].train
        batch = collate(ds, list(range(len(ds))), tokenizer.pad_token_id)
        outs = []
        teacher_tasks = run_config(sample_data_dir, tiny_encoder, "x", tasks=["rte", "stsb"]).tasks
        for t in teachers:
            model = MTDNN(load_encoder(tiny_encoder, 1), teacher_tasks, "pooler")
            weights = load_file(str(t / "checkpoints" / "epoch-001" / "model.safetensors"))
            model.load_state_dict(weights)
            with torch.no_grad():
                out = model.eval()(task, batch)
            outs.append(F.softmax(out, -1) if task == "rte" else out)
        torch.testing.assert_close(built, (outs[0] + outs[1]) / 2, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_soft_target_files_are_checked(sample_data_dir, tiny_encoder, tmp_path, teachers):
    cache = str(tmp_path / "cache" / "tokenized")
    base = {"epochs": 1, "cache_dir": cache}
    train(run_config(sample_data_dir, tiny_encoder, tmp_path / "s0", **base,
                     distill={"teachers": {"rte": [str(teachers[0])]}}), quiet=True)
    built = next((tmp_path / "cache" / "soft-targets").glob("rte-*.safetensors"))
    targets = load_file(str(built))["targets"]
    from safetensors import safe_open

    with safe_open(str(built), framework="pt") as f:
        meta = f.metadata()

    def refused(name, tensor, words, task="rte", **meta_changes):
        path = tmp_path / name
        save_file({"targets": tensor}, str(path), metadata={**meta, **meta_changes})
        out = tmp_path / f"out-{name}"
        with pytest.raises(ConfigError) as err:
            train(run_config(sample_data_dir, tiny_encoder, out, **base,
                             distill={"teachers": {task: str(path)}}), quiet=True)
        assert words in str(err.value) and not out.exists()

    refused("sum.safetensors", targets * 0.5, "not summing to 1")
    refused("rows.safetensors", targets[:-1], "other training rows")
    refused("labels.safetensors", targets, "labels", labels=json.dumps(["yes", "no"]))
    refused("probs-for-regression.safetensors", torch.full((targets.shape[0], 2), 0.5),
            "class probabilities for the regression task", task="stsb", type="regression")
    # Other rows: the same file against a student with fewer training examples.
    out = tmp_path / "fewer"
    with pytest.raises(ConfigError, match="other training rows"):
        train(run_config(sample_data_dir, tiny_encoder, out, **base, max_train_examples=32,
                         distill={"teachers": {"rte": str(built)}}), quiet=True)


@pytest.mark.parametrize(("distill", "words"), [
    ({"teachers": {"qnli": ["."]}}, "not among the run's tasks"),
    ({"teachers": {"rte": ["/no/such/run"]}}, "does not exist"),
    ({"teachers": {}}, "distill: expected"),
    ({"teachers": {"rte": [1]}}, "expected a list of teacher run folders"),
])
def test_bad_distill_settings(sample_data_dir, tiny_encoder, tmp_path, distill, words):
    with pytest.raises(ConfigError) as err:
        run_config(sample_data_dir, tiny_encoder, tmp_path / "x", distill=distill)
    assert words in str(err.value)


def test_teacher_with_another_label_set_is_refused(sample_data_dir, tiny_encoder, tmp_path):
    teacher = tmp_path / "teacher"
    train(run_config(sample_data_dir, tiny_encoder, teacher, epochs=1,
                     tasks=[{"preset": "mrpc", "name": "rte"}]), quiet=True)
    # mrpc's labels are 0/1, rte's entailment/not_entailment: same name, other label set.
    with pytest.raises(ConfigError, match="teachers must share the label set"):
        train(run_config(sample_data_dir, tiny_encoder, tmp_path / "student", epochs=1,
                         distill={"teachers": {"rte": [str(teacher)]}}), quiet=True)
    assert not (tmp_path / "student").exists()


@pytest.mark.slow
def test_command_picks_the_best_teachers_and_builds(sample_data_dir, tiny_encoder, tmp_path,
                                                    teachers, capsys):
    import yaml

    config = tmp_path / "student.yaml"
    config.write_text(yaml.safe_dump({
        "encoder": tiny_encoder, "data_dir": str(sample_data_dir), "tasks": ["rte", "mrpc"],
        "max_train_examples": 64, "max_eval_examples": 32, "epochs": 1,
        "cache_dir": str(tmp_path / "cache" / "tokenized"), "output_dir": str(tmp_path / "s")}))
    code = main(["soft-targets", "--config", str(config), "--candidates",
                 *map(str, teachers), "--best", "1"])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, captured.err
    scores = {t: json.loads((t / "result.json").read_text())["best"]["rte"]["accuracy"]
              for t in teachers}
    best = max(scores, key=lambda t: (scores[t], -teachers.index(t)))
    assert f"rte: teacher {best} " in captured.err
    snippet = yaml.safe_load(out)  # stdout is the setting alone
    assert set(snippet["distill"]["teachers"]) == {"rte"}  # no teacher trained mrpc
    # The student config with that snippet trains.
    cfg = yaml.safe_load(config.read_text()) | snippet
    config.write_text(yaml.safe_dump(cfg))
    assert main(["train", "--config", str(config), "--quiet"]) == 0
    # No teachers at all: a usage error.
    del cfg["distill"]
    config.write_text(yaml.safe_dump(cfg))
    assert main(["soft-targets", "--config", str(config)]) == 2
    assert "distill.teachers" in capsys.readouterr().err


class Killed(Exception):
    pass


def _die(report):
    raise Killed


def _soft_file(path, data, targets):
    from weightsearch.trainer.distill import fingerprint

    spec = data.spec
    save_file({"targets": targets.float().contiguous()}, str(path), metadata={
        "task": spec.name, "type": spec.type, "rows": fingerprint(data),
        "labels": json.dumps(list(spec.labels or ()))})
    return str(path)


@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_the_loop_trains_on_the_mean_of_hard_and_soft_losses(sample_data_dir, tiny_encoder,
                                                             tmp_path):
    # A regression task makes the mix readable from the logged first-update losses. For a loss
    # a * hard + b * soft with soft targets t = y + c (y the labels), the soft loss is
    # H - 2c * m + c^2 (H the hard loss, m the mean residual), so t = y gives (a + b) * H and
    # the mean of the runs at +c and -c gives (a + b) * H + b * c^2. MT-DNN-KD: a = b = 1/2.
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.run_data import load_data

    base = {"epochs": 1, "tasks": ["stsb"], "central_task": "stsb",
            "weighting": {"scheme": "equal"}}
    data = load_data(run_config(sample_data_dir, tiny_encoder, "x", **base),
                     load_tokenizer(tiny_encoder))["stsb"]
    labels = torch.tensor(data.train["label"], dtype=torch.float32)

    def first_loss(name, targets=None):
        distill = None if targets is None else {"teachers": {"stsb": _soft_file(
            tmp_path / f"{name}.safetensors", data, targets)}}
        out = tmp_path / name
        train(run_config(sample_data_dir, tiny_encoder, out, **base, distill=distill),
              quiet=True)
        return read_jsonl(out / "steps.jsonl")[0]["loss"]

    c = 0.5
    hard = first_loss("hard")
    same, up, down = (first_loss(n, labels + d) for n, d in (("same", 0), ("up", c), ("down", -c)))
    assert same / hard == pytest.approx(1.0, rel=1e-5)  # a + b
    assert ((up + down) / 2 - same) / c**2 == pytest.approx(0.5, rel=1e-4)  # b


def test_a_home_relative_soft_target_file_is_a_file(sample_data_dir, tiny_encoder, tmp_path,
                                                     monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "targets.safetensors").write_bytes(b"placeholder")
    (tmp_path / "teacher").mkdir()
    with pytest.raises(ConfigError, match="either one soft-target file or teacher run folders"):
        run_config(sample_data_dir, tiny_encoder, tmp_path / "x", distill={"teachers": {
            "rte": ["~/targets.safetensors", str(tmp_path / "teacher")]}})


@pytest.mark.slow
def test_a_finetuned_teacher_teaches_and_ranks_with_its_finetuned_checkpoint(
        sample_data_dir, tiny_encoder, tmp_path):
    from weightsearch.trainer.distill import pick_teachers
    from weightsearch.trainer.model import MTDNN, load_encoder

    teacher = tmp_path / "teacher"
    train(run_config(sample_data_dir, tiny_encoder, teacher, epochs=1, tasks=["rte", "stsb"],
                     finetune={"tasks": ["rte"], "epochs": 2, "lr": 1e-3, "heads": "fresh"}),
          quiet=True)
    cache = str(tmp_path / "cache" / "tokenized")
    student = run_config(sample_data_dir, tiny_encoder, tmp_path / "student", epochs=1,
                         tasks=["rte", "stsb"], cache_dir=cache)
    picked = pick_teachers(student, [str(teacher)], 1)
    (folder, rte), = picked["rte"]
    (_, stsb), = picked["stsb"]
    tuned = teacher / "finetune" / "rte"
    assert folder == teacher and rte.stage == "finetuned" and rte.run == tuned
    assert rte.weights == tuned / "checkpoints" / "epoch-002" / "model.safetensors"
    # Ranked by the dev score of the checkpoint it teaches with (the last epoch's), not by
    # the multi-task stage's or the best epoch's.
    last = [r for r in read_jsonl(tuned / "metrics.jsonl") if r["epoch"] == 2]
    assert rte.epoch == 2 and rte.score == last[0]["primary"]
    assert (stsb.stage, stsb.epoch, stsb.run) == ("multitask", 1, teacher)

    train(run_config(sample_data_dir, tiny_encoder, tmp_path / "student", epochs=1,
                     tasks=["rte", "stsb"], cache_dir=cache,
                     distill={"teachers": {"rte": [str(teacher)]}}), quiet=True)
    built = load_file(str(next((tmp_path / "cache" / "soft-targets").glob("rte-*"))))["targets"]

    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.run_data import load_data

    tokenizer = load_tokenizer(tiny_encoder)
    data = load_data(student, tokenizer)["rte"]
    batch = data.collate(data.train, list(range(data.train_size)), tokenizer.pad_token_id)
    expected = {}
    for stage, weights, tasks in (("finetuned", rte.weights, ["rte"]),
                                  ("multitask", stsb.weights, ["rte", "stsb"])):
        specs = run_config(sample_data_dir, tiny_encoder, "x", tasks=tasks).tasks
        model = MTDNN(load_encoder(tiny_encoder, 1), specs, "pooler")
        model.load_state_dict(load_file(str(weights)))
        with torch.no_grad():
            expected[stage] = F.softmax(model.eval()("rte", batch), -1)
    torch.testing.assert_close(built, expected["finetuned"], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(built, expected["multitask"], atol=1e-3)


@pytest.mark.slow
def test_resume_notices_changed_teachers_but_not_moved_ones(sample_data_dir, tiny_encoder,
                                                           tmp_path, teachers):
    import shutil

    teacher = tmp_path / "teacher"
    shutil.copytree(teachers[0], teacher)
    out = tmp_path / "student"

    def student(source):
        return run_config(sample_data_dir, tiny_encoder, out, epochs=2,
                          cache_dir=str(tmp_path / "cache" / "tokenized"),
                          distill={"teachers": {"rte": [str(source)]}})

    with pytest.raises(Killed):
        train(student(teacher), report=_die, quiet=True)
    before = sorted(p.name for p in out.rglob("*"))
    changed = tmp_path / "changed"
    shutil.copytree(teacher, changed)
    retrain_checkpoint(changed / "checkpoints" / "epoch-001")
    with pytest.raises(ConfigError, match=r"distill\.teachers\.rte: the soft targets differ"):
        train(student(changed), resume=True, quiet=True)
    assert sorted(p.name for p in out.rglob("*")) == before
    moved = tmp_path / "moved"
    shutil.move(teacher, moved)
    result = train(student(moved), resume=True, quiet=True)
    assert [h["epoch"] for h in result.history] == [1, 2]
