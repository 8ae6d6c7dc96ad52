"""Real runs with the token-level task types on a tiny random-init encoder: SQuAD 2.0 and SWAG
samples beside GLUE ones, weighted stochastic batch selection, SAN and MMoE, resume, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.helpers import QA_SAMPLE as QA
from tests.helpers import ROOT, check_siwlm_steps, read_jsonl
from weightsearch.cli import main
from weightsearch.trainer import load_config, train


def mix(sample_data_dir: Path, tiny_encoder: str, out: Path, **extra) -> dict:
    raw = {
        "encoder": tiny_encoder,
        "data_dir": str(sample_data_dir),
        "tasks": [
            # windows of 128 tokens: the tiny encoder has 256 positions
            {"preset": "squad2", "data_dir": str(QA), "max_seq_len": 128, "doc_stride": 48,
             "max_query_len": 32},
            {"preset": "swag", "data_dir": str(QA)},
            {"preset": "mrpc", "head": "san"},
            "cola",
        ],
        "central_task": "squad2",
        "weighting": {"scheme": "siwlm", "central_weight": 3, "focus_span": 2},
        "sampling": {"scheme": "weighted", "weights": {"squad2": 0.7},
                     "epoch_ends_with": "squad2"},
        "mixture": {"experts": 2, "expert_hidden": 16},
        "epochs": 2,
        "batch_size": 8,
        "max_train_examples": 40,
        "max_eval_examples": 24,
        "max_seq_len": 64,
        "output_dir": str(out),
        "log_every": 5,
        "precision": "fp32",
    }
    raw.update(extra)
    return raw


@pytest.mark.slow
def test_the_mix_trains_scores_and_resumes_exactly(sample_data_dir, tiny_encoder, tmp_path):
    straight = load_config(mix(sample_data_dir, tiny_encoder, tmp_path / "straight"))
    resumed = load_config(mix(sample_data_dir, tiny_encoder, tmp_path / "resumed"))
    expected = train(straight, quiet=True)

    class Crash(Exception):
        pass

    def crash_after_first_epoch(report):
        if report.epoch == 1:
            raise Crash

    with pytest.raises(Crash):
        train(resumed, report=crash_after_first_epoch, quiet=True)
    got = train(resumed, resume=True, quiet=True)
    assert got.final == expected.final and got.history == expected.history
    a = load_file(tmp_path / "straight" / "checkpoints" / "epoch-002" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "checkpoints" / "epoch-002" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(k.startswith("mixture.gates.squad2") for k in a)  # MMoE is in the model
    assert any(k.startswith("heads.mrpc.san.") for k in a)  # and SAN on MRPC
    out = tmp_path / "straight"
    assert (out / "steps.jsonl").read_text() == (tmp_path / "resumed" / "steps.jsonl").read_text()

    metrics = expected.final
    assert set(metrics["squad2"]) == {"exact", "f1", "has_ans_exact", "has_ans_f1",
                                      "no_ans_exact", "no_ans_f1", "best_exact", "best_f1"}
    assert set(metrics["swag"]) == {"accuracy"} and "f1" in metrics["mrpc"]
    assert "mcc" in metrics["cola"]
    for epoch in (1, 2):
        preds = json.loads((out / f"predictions-squad2-epoch-{epoch}.json").read_text())
        odds = json.loads((out / f"null-odds-squad2-epoch-{epoch}.json").read_text())
        assert len(preds) == 24 and preds.keys() == odds.keys()  # the first 24 dev questions
    notes = json.loads((out / "data.json").read_text())["notes"]["squad2"]
    assert notes["train"]["windows"] > 40  # contexts longer than one window
    assert expected.train_sizes["squad2"] == 40  # sizes count questions, not windows

    steps = read_jsonl(out / "steps.jsonl")
    for epoch in (1, 2):
        tasks = [s["task"] for s in steps if s["epoch"] == epoch]
        assert tasks[-1] == "squad2"  # every epoch ends when the QA batches run out
        assert {"swag", "mrpc", "cola"} & set(tasks)
    # The SIWLM weights still follow docs/training.md ("SIWLM, exactly") update by update,
    # whatever the batch order.
    check = check_siwlm_steps(out)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
@pytest.mark.parametrize("task", ["squad2", "swag"])
def test_span_qa_and_multiple_choice_heads_fit_a_batch(tiny_encoder, task):
    """Through the real data layer and model: a head that can learn fits eight examples."""
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.model import MTDNN, load_encoder
    from weightsearch.trainer.task_data import load_task_data
    from weightsearch.trainer.task_parsing import parse_tasks

    problems: list[str] = []
    (spec,) = parse_tasks([{"preset": task, "data_dir": str(QA), "max_seq_len": 128,
                            **({"doc_stride": 48, "max_query_len": 32} if task == "squad2"
                               else {})}], problems)
    data = load_task_data(spec, None, load_tokenizer(tiny_encoder), 64, None,
                          max_train_examples=8)
    model = MTDNN(load_encoder(tiny_encoder, 1), (spec,), "pooler")
    batch = data.collate(data.train, list(range(8)), 0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(60):
        loss = model.head(task).loss(model(task, batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses


BAD = [
    ("doc_stride beyond the window",
     {"tasks": [{"preset": "squad2", "data_dir": str(QA), "max_seq_len": 128,
                 "doc_stride": 128}]}, "tasks[0].doc_stride"),
    ("negative sampling weight",
     {"sampling": {"scheme": "weighted", "weights": {"squad2": -0.5}}},
     "sampling.weights.squad2"),
    ("all-zero sampling weights",
     {"sampling": {"scheme": "weighted", "weights": {"squad2": 0}, "others": 0}},
     "every task's weight is 0"),
    ("sampling weight of an unknown task",
     {"sampling": {"scheme": "weighted", "weights": {"squad": 0.8}}}, "sampling.weights.squad"),
    ("epoch ends with an unknown task",
     {"sampling": {"scheme": "weighted", "weights": {"squad2": 0.8},
                   "epoch_ends_with": "qa"}}, "sampling.epoch_ends_with"),
    ("san on regression", {"tasks": ["stsb", {"preset": "rte", "head": "san"},
                                     {"preset": "stsb", "name": "sts2", "head": "san"}],
                           "central_task": "stsb"}, "tasks[2].head"),
    ("no experts", {"mixture": {"experts": 0}}, "mixture.experts"),
    ("window above the encoder's positions",
     {"tasks": [{"preset": "squad2", "data_dir": str(QA)}]}, "tasks[0].max_seq_len: 384"),
]


@pytest.mark.parametrize(("case", "change", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_settings_exit_2_and_write_nothing(sample_data_dir, tiny_encoder, tmp_path, capsys,
                                               case, change, needle):
    raw = mix(sample_data_dir, tiny_encoder, tmp_path / "out", cache_dir=str(tmp_path / "c"))
    raw.update(change)
    if "tasks" in change and "central_task" not in change:
        raw["central_task"] = "squad2"
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    code = main(["train", "--config", str(config), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "c").exists()


def _bad_squad(data: Path) -> None:
    doc = json.loads((QA / "SQuAD2" / "train-v2.0.json").read_text())
    qa = doc["data"][0]["paragraphs"][1]["qas"][0]
    qa["answers"][0]["answer_start"] += 1
    (data / "SQuAD2").mkdir(parents=True)
    (data / "SQuAD2" / "train-v2.0.json").write_text(json.dumps(doc))
    (data / "SQuAD2" / "dev-v2.0.json").write_text((QA / "SQuAD2" / "dev-v2.0.json").read_text())


def _bad_swag(data: Path) -> None:
    (data / "SWAG").mkdir(parents=True)
    lines = (QA / "SWAG" / "train.csv").read_text().splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0] + ",4"
    (data / "SWAG" / "train.csv").write_text("\n".join(lines) + "\n")
    (data / "SWAG" / "val.csv").write_text((QA / "SWAG" / "val.csv").read_text())


@pytest.mark.parametrize(("task", "corrupt", "needle"), [
    ("squad2", _bad_squad, "does not point at the answer text"),
    ("swag", _bad_swag, "line 6: label '4'"),
])
def test_bad_data_exits_2_and_writes_nothing(sample_data_dir, tiny_encoder, tmp_path, capsys,
                                             task, corrupt, needle):
    data = tmp_path / "data"
    corrupt(data)
    raw = mix(sample_data_dir, tiny_encoder, tmp_path / "out", cache_dir=str(tmp_path / "c"))
    raw["tasks"] = [t for t in raw["tasks"] if isinstance(t, dict) and t["preset"] == task]
    raw["tasks"][0]["data_dir"] = str(data)
    raw.update(central_task=task, sampling=None, max_train_examples=None)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["train", "--config", str(config), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_minilm_runs_the_qa_mix_example_on_the_samples(tmp_path, monkeypatch):
    """The shipped example, shortened: the MiniLM encoder on the SQuAD 2.0, SWAG and GLUE
    samples under weighted batch selection; scores, prediction files and batch shares."""
    import collections

    from weightsearch.trainer.heads.span_qa import squad_metrics

    monkeypatch.chdir(tmp_path)  # the example's paths start at its own folder, from anywhere
    cfg = load_config(ROOT / "examples" / "run-qa-mix-sample.yaml",
                      [f"output_dir={tmp_path / 'run'}", "epochs=1", "max_train_examples=96",
                       "max_eval_examples=48", f"cache_dir={tmp_path / 'cache'}"])
    result = train(cfg, quiet=True)
    squad = result.final["squad2"]
    assert 0 <= squad["exact"] <= squad["f1"] <= 1 and 0 <= squad["best_f1"] <= 1
    assert squad["best_f1"] >= squad["f1"] - 1e-9  # the best threshold includes 0's neighbours
    assert 0 <= result.final["swag"]["accuracy"] <= 1
    # The prediction files score to the reported numbers with the official definitions.
    out = tmp_path / "run"
    preds = json.loads((out / "predictions-squad2-epoch-1.json").read_text())
    odds = json.loads((out / "null-odds-squad2-epoch-1.json").read_text())
    dev = json.loads((QA / "SQuAD2" / "dev-v2.0.json").read_text())
    gold = {qa["id"]: [a["text"] for a in qa["answers"]] for article in dev["data"]
            for p in article["paragraphs"] for qa in p["qas"]}
    ids = list(preds)
    again = squad_metrics([gold[i] for i in ids], [preds[i] for i in ids],
                          np.array([odds[i] for i in ids]))
    assert again["f1"] == pytest.approx(squad["f1"])
    assert again["best_f1"] == pytest.approx(squad["best_f1"])
    steps = read_jsonl(out / "steps.jsonl")
    counts = collections.Counter(s["task"] for s in steps)
    assert steps[-1]["task"] == "squad2" and counts["squad2"] == 3  # 96 questions / 32


def test_the_console_says_what_windowing_did(sample_data_dir, tiny_encoder, tmp_path, capsys):
    """Span QA windows contexts and cuts only questions: the console says so in those words,
    never "examples truncated" or "dropped", and agrees with data.json."""
    raw = mix(sample_data_dir, tiny_encoder, tmp_path / "run", epochs=1, overlong="drop",
              max_train_examples=24, max_eval_examples=12, sampling={"scheme": "shuffle"},
              mixture=None)
    raw["tasks"] = [{"preset": "squad2", "data_dir": str(QA), "max_seq_len": 64,
                     "doc_stride": 16, "max_query_len": 6}]
    raw["weighting"] = {"scheme": "equal"}
    train(load_config(raw))
    out = capsys.readouterr().out
    notes = json.loads((tmp_path / "run" / "data.json").read_text())
    train_notes = notes["notes"]["squad2"]["train"]
    cut = notes["truncated"]["squad2"]["train"]
    assert cut > 0 and f"squad2: {cut} train questions cut to max_query_len=6 tokens" in out
    assert (f"squad2: train: {train_notes['windows']} windows of at most 64 tokens (doc_stride 16);"
            f" {train_notes['examples_with_several_windows']} contexts span several") in out
    assert "examples truncated" not in out and "dropped" not in out
