"""The second stage (per-task fine-tuning from the multi-task encoder), SMART regularisation,
starting from an earlier run's weights, and the siwlm-paper preset."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import read_jsonl, retrain_checkpoint, run_config
from weightsearch.core.errors import ConfigError
from weightsearch.trainer import load_config, train


def _weights(folder):
    return load_file(str(folder / "model.safetensors"))


class Killed(Exception):
    pass


@pytest.mark.slow
def test_finetuning_starts_from_the_multitask_weights(sample_data_dir, tiny_encoder, tmp_path):
    # A learning rate of 1e-12 leaves the weights where fine-tuning started them, to within
    # float noise: the multi-task encoder and, with heads: keep, the task's multi-task head.
    out = tmp_path / "run"
    cfg = run_config(sample_data_dir, tiny_encoder, out,
                     finetune={"tasks": ["rte", "stsb"], "epochs": 1, "lr": 1e-12})
    reports = []
    result = train(cfg, report=reports.append, quiet=True)

    multitask = _weights(out / "checkpoints" / "epoch-002")
    for task in ("rte", "stsb"):
        tuned = _weights(out / "finetune" / task / "checkpoints" / "epoch-001")
        assert {k.split(".")[0] for k in tuned} >= {"encoder", "heads"}
        assert not any(k.startswith("heads.") and f"heads.{task}." not in k for k in tuned)
        for key, value in tuned.items():
            torch.testing.assert_close(value, multitask[key], atol=1e-8, rtol=0)
    # Both stages are reported, stored and labelled.
    assert [(r.stage, r.epoch) for r in reports] == [
        ("multitask", 1), ("multitask", 2), ("finetuned", 1), ("finetuned", 1)]
    assert set(reports[2].metrics) == {"rte"} and set(reports[3].metrics) == {"stsb"}
    rows = read_jsonl(out / "metrics.jsonl")
    assert {(r["stage"], r["task"]) for r in rows if r["stage"] == "finetuned"} == {
        ("finetuned", "rte"), ("finetuned", "stsb")}
    assert sum(r["stage"] == "multitask" for r in rows) == 6  # 3 tasks x 2 epochs
    saved = json.loads((out / "result.json").read_text())
    assert saved["stage"] == "multitask" and set(saved["finetuned"]) == {"rte", "stsb"}
    assert saved["finetuned"]["rte"]["stage"] == "finetuned"
    assert result.stage_best("finetuned")["rte"] == saved["finetuned"]["rte"]["best"]["rte"]


@pytest.mark.slow
def test_fresh_heads_keep_only_the_encoder(sample_data_dir, tiny_encoder, tmp_path):
    out = tmp_path / "run"
    cfg = run_config(sample_data_dir, tiny_encoder, out, epochs=1,
                     finetune={"tasks": "central", "epochs": 1, "lr": 1e-12, "heads": "fresh"})
    train(cfg, quiet=True)
    multitask = _weights(out / "checkpoints" / "epoch-001")
    tuned = _weights(out / "finetune" / "rte" / "checkpoints" / "epoch-001")
    for key in tuned:
        close = torch.allclose(tuned[key], multitask[key], atol=1e-8, rtol=0)
        assert close == key.startswith("encoder."), key


@pytest.mark.slow
def test_resume_inside_finetuning_equals_an_uninterrupted_run(
    sample_data_dir, tiny_encoder, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the relative resume below changes directory
    ft = {"tasks": ["rte", "mrpc"], "epochs": 2, "lr": 1e-4, "adversarial": True}
    straight = train(run_config(sample_data_dir, tiny_encoder, tmp_path / "a", epochs=1,
                                finetune=ft), quiet=True)

    def die_in_finetuning(report):
        if report.stage == "finetuned" and report.epoch == 1 and "mrpc" in report.metrics:
            raise Killed

    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "b", epochs=1, finetune=ft)
    with pytest.raises(Killed):
        train(cfg, report=die_in_finetuning, quiet=True)
    assert not (tmp_path / "b" / "result.json").exists()
    # A study's retry continues a copy of the killed folder (sweep.trainable.attempt_dir), and
    # a user may resume by a relative path: the fine-tuning runs' start (the multi-task
    # checkpoint, which moved with the copy) is the same weights, so both continue.
    shutil.copytree(tmp_path / "b", tmp_path / "b-attempt1")
    resumed = train(cfg, resume=True, quiet=True)
    copied = train(cfg.replace(output_dir="b-attempt1"), resume=True, quiet=True)

    for run, folder in ((resumed, "b"), (copied, "b-attempt1")):
        for task in ("rte", "mrpc"):
            assert run.finetuned[task].history == straight.finetuned[task].history
            a = _weights(tmp_path / "a" / "finetune" / task / "checkpoints" / "epoch-002")
            b = _weights(tmp_path / folder / "finetune" / task / "checkpoints" / "epoch-002")
            for key in a:
                torch.testing.assert_close(a[key], b[key], atol=0, rtol=0)
        rows = read_jsonl(tmp_path / folder / "metrics.jsonl")
        assert sum(r["stage"] == "finetuned" for r in rows) == 4  # 2 tasks x 2 epochs, once


def test_smart_term_is_zero_without_perturbation_and_positive_with_it(
    sample_data_dir, tiny_encoder
):
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.model import MTDNN, load_encoder
    from weightsearch.trainer.smart import AdversarialSettings, smart_loss
    from weightsearch.trainer.task_data import collate, load_task_data

    cfg = run_config(sample_data_dir, tiny_encoder, "unused")
    tokenizer = load_tokenizer(tiny_encoder)
    data = load_task_data(cfg.task("rte"), cfg.data_dir, tokenizer, 64, None, 16)
    batch = collate(data.train, list(range(16)), tokenizer.pad_token_id)
    model = MTDNN(load_encoder(tiny_encoder, 1), cfg.tasks).eval()  # no dropout noise
    torch.manual_seed(0)
    clean = model("rte", batch)
    still = AdversarialSettings(enabled=True, noise=0.0, step_size=0.0)
    assert smart_loss(model, "rte", batch, clean, still).item() == pytest.approx(0.0, abs=1e-10)
    moved = AdversarialSettings(enabled=True, noise=1e-2, step_size=1e-2)
    term = smart_loss(model, "rte", batch, clean, moved)
    assert term.item() > 0
    term.backward()  # reaches the encoder's weights
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def _rte_model_and_batch(sample_data_dir, tiny_encoder):
    """A tiny model without dropout, 8 RTE rows and their clean outputs: what SMART perturbs."""
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.model import MTDNN, load_encoder
    from weightsearch.trainer.task_data import collate, load_task_data

    cfg = run_config(sample_data_dir, tiny_encoder, "unused")
    tokenizer = load_tokenizer(tiny_encoder)
    data = load_task_data(cfg.task("rte"), cfg.data_dir, tokenizer, 64, None, 8)
    batch = collate(data.train, list(range(8)), tokenizer.pad_token_id)
    model = MTDNN(load_encoder(tiny_encoder, 1), cfg.tasks).eval()
    return model, batch, model("rte", batch).detach()


def test_smart_is_the_reference_codes_perturbation(sample_data_dir, tiny_encoder):
    """Re-stated from the reference's SmartPerturbation (one step): noise on the embedding
    layer's output (padding zeroed), the gradient with respect to it of the reference's
    stable_kl(perturbed, clean) (mt_dnn/loss.py: 2 sum p (r(p) - r(y)) / batch, r(q) =
    -log(1 / (q + 1e-6) - 1 + 1e-6) held constant), the adversarial input
    x + eta * g / (max|g| + 1e-6) per token with the noise dropped and nothing projected, and
    the symmetric KL between the clean and adversarial outputs."""
    import torch.nn.functional as F

    from weightsearch.trainer.smart import AdversarialSettings, smart_loss

    model, batch, clean = _rte_model_and_batch(sample_data_dir, tiny_encoder)
    settings = AdversarialSettings(enabled=True, noise=1e-3, step_size=1e-2)
    torch.manual_seed(5)
    got = smart_loss(model, "rte", batch, clean, settings)

    torch.manual_seed(5)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    x = model.encoder.embeddings(input_ids=batch["input_ids"],
                                 token_type_ids=batch["token_type_ids"]) * mask
    d0 = (torch.randn_like(x) * 1e-3 * mask).requires_grad_()
    perturbed = model("rte", batch, embedding_output=x.detach() + d0)
    p_adv, y = F.softmax(perturbed, -1), F.softmax(clean, -1)
    r_p = -(1.0 / (p_adv + 1e-6) - 1 + 1e-6).detach().log()
    r_y = -(1.0 / (y + 1e-6) - 1 + 1e-6).detach().log()
    ascended = (p_adv * (r_p - r_y) * 2).sum() / p_adv.shape[0]
    (g,) = torch.autograd.grad(ascended, d0, retain_graph=True)
    x_adv = (x + 1e-2 * g / (g.abs().max(dim=-1, keepdim=True).values + 1e-6)).detach()
    adv = model("rte", batch, embedding_output=x_adv)
    p, q = F.log_softmax(clean, -1), F.log_softmax(adv, -1)
    expected = (F.kl_div(p, q, log_target=True, reduction="batchmean")
                + F.kl_div(q, p, log_target=True, reduction="batchmean"))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-9)
    assert (x_adv - x).abs().max() <= 1e-2 + 1e-9  # a step of eta, not a box of epsilon
    assert (x_adv - x).abs().max() > 1e-3  # and no clipping to the noise scale either
    # KL(clean || perturbed), which the ascent took before, points elsewhere: another term.
    kl = F.kl_div(F.log_softmax(perturbed, -1), y, reduction="batchmean")
    (g_kl,) = torch.autograd.grad(kl, d0)
    x_kl = (x + 1e-2 * g_kl / (g_kl.abs().max(dim=-1, keepdim=True).values + 1e-6)).detach()
    assert not torch.allclose(x_kl, x_adv, rtol=0, atol=1e-4)
    # ... which `ascent: kl` keeps as an option.
    torch.manual_seed(5)
    as_kl = smart_loss(model, "rte", batch, clean, dataclasses.replace(settings, ascent="kl"))
    adv_kl = model("rte", batch, embedding_output=x_kl)
    q_kl = F.log_softmax(adv_kl, -1)
    torch.testing.assert_close(as_kl, F.kl_div(p, q_kl, log_target=True, reduction="batchmean")
                               + F.kl_div(q_kl, p, log_target=True, reduction="batchmean"),
                               rtol=1e-4, atol=1e-9)
    # Under bf16 autocast the perturbed passes still run in fp32: the same term.
    torch.manual_seed(5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        in_bf16 = smart_loss(model, "rte", batch, clean, settings)
    torch.testing.assert_close(in_bf16, got, rtol=1e-4, atol=1e-9)


@pytest.mark.slow
def test_init_from_an_earlier_run(sample_data_dir, tiny_encoder, tmp_path, tiny_run_1_epoch):
    first = tiny_run_1_epoch.out  # run_config's run, epochs=1
    second = tmp_path / "second"
    cfg = run_config(sample_data_dir, tiny_encoder, second, epochs=1, lr=1e-12,
                     tasks=["rte"], init_from=str(first))
    train(cfg, quiet=True)
    before = _weights(first / "checkpoints" / "epoch-001")
    after = _weights(second / "checkpoints" / "epoch-001")
    torch.testing.assert_close(after["heads.rte.proj.weight"], before["heads.rte.proj.weight"],
                               atol=1e-8, rtol=0)


@pytest.mark.slow
def test_resume_compares_init_from_by_content_not_by_path(sample_data_dir, tiny_encoder,
                                                          tmp_path, tiny_run_1_epoch):
    first = tmp_path / "first"
    shutil.copytree(tiny_run_1_epoch.out, first)  # run_config's run, epochs=1; moved below
    out = tmp_path / "second"

    def die_after_epoch_1(report):
        raise Killed

    with pytest.raises(Killed):
        train(run_config(sample_data_dir, tiny_encoder, out, init_from=str(first)),
              report=die_after_epoch_1, quiet=True)
    before = sorted(p.name for p in out.rglob("*"))
    # The source's weights changed under the same kind of path: refused, nothing written.
    changed = tmp_path / "changed"
    shutil.copytree(first, changed)
    retrain_checkpoint(changed / "checkpoints" / "epoch-001")
    with pytest.raises(ConfigError, match="init_from: the weights it names are not those"):
        train(run_config(sample_data_dir, tiny_encoder, out, init_from=str(changed)),
              resume=True, quiet=True)
    assert sorted(p.name for p in out.rglob("*")) == before
    # The same weights somewhere else: the run continues.
    moved = tmp_path / "moved"
    shutil.move(first, moved)
    result = train(run_config(sample_data_dir, tiny_encoder, out, init_from=str(moved)),
                   resume=True, quiet=True)
    assert [h["epoch"] for h in result.history] == [1, 2]


def test_init_from_bad_sources_are_refused_before_writing(sample_data_dir, tiny_encoder,
                                                          tmp_path):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not safetensors")
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="init_from: cannot read"):
        train(run_config(sample_data_dir, tiny_encoder, out, init_from=str(junk)), quiet=True)
    assert not out.exists()
    with pytest.raises(ConfigError, match=r"init_from: .* does not exist"):
        run_config(sample_data_dir, tiny_encoder, out, init_from=str(tmp_path / "nothing"))
    # Weights of another shape: a regression head named rte where the earlier run had 2 classes.
    first = tmp_path / "first"
    train(run_config(sample_data_dir, tiny_encoder, first, epochs=1, tasks=["rte"]), quiet=True)
    other = {"preset": "stsb", "name": "rte"}
    with pytest.raises(ConfigError, match="init_heads: fresh"):
        train(run_config(sample_data_dir, tiny_encoder, out, tasks=[other],
                         init_from=str(first)), quiet=True)
    assert not out.exists()


@pytest.mark.parametrize(("finetune", "words"), [
    ({"tasks": ["qnli"]}, "finetune.tasks: 'qnli' not among"),
    ({"epochs": 0}, "finetune.epochs"),
    ({"lr": -1}, "finetune.lr"),
    ({"heads": "borrowed"}, "finetune.heads"),
    ({"optimizer": "sgd"}, "finetune.optimizer"),
    ({"head": "pointer", "heads": "fresh"}, "finetune.head: 'pointer' is not one of"),
    ({"head": "san"}, "finetune.head: san differs from the multi-task head of rte"),
    ({"rounds": 2}, "finetune.rounds: unknown"),
    ({"adversarial": {"epsilon": -1}}, "finetune.adversarial.epsilon"),
    ("yes", "finetune: expected a mapping"),
])
def test_bad_finetune_settings(sample_data_dir, tiny_encoder, tmp_path, finetune, words):
    with pytest.raises(ConfigError) as err:
        run_config(sample_data_dir, tiny_encoder, tmp_path / "x", finetune=finetune)
    assert words in str(err.value)


def test_siwlm_paper_preset_resolves_value_by_value(sample_data_dir):
    cfg = load_config({"preset": "siwlm-paper", "data_dir": str(sample_data_dir),
                       "tasks": ["rte", "mrpc"], "weighting": {"central_weight": 12},
                       "max_seq_len": 256})
    assert cfg.max_seq_len == 256  # the config's own value wins
    assert (cfg.optimizer, cfg.lr, cfg.batch_size, cfg.epochs, cfg.warmup, cfg.grad_clip) == (
        "adamax", 5e-5, 32, 5, 0.1, 1.0)
    assert (cfg.weight_decay, cfg.overlong, cfg.eval_max_seq_len, cfg.pooling) == (
        0.01, "drop", 512, "pooler")
    assert (cfg.precision, cfg.length_bucketing, cfg.batches) == ("fp32", False, "fixed")
    w = cfg.weighting
    assert (w.scheme, w.variant, w.central_weight, w.focus_span, w.off_focus) == (
        "siwlm", "reference", 12, 20, 0.1)
    ft = cfg.finetune
    assert (ft.tasks, ft.epochs, ft.optimizer, ft.lr, ft.batch_size, ft.heads, ft.head) == (
        "central", 5, "radam", 5e-5, 32, "fresh", "linear")  # SIWLM's run_mrpc.sh
    assert ft.adversarial.enabled and (ft.adversarial.epsilon, ft.adversarial.noise,
                                       ft.adversarial.step_size, ft.adversarial.weight) == (
        1e-5, 1e-5, 1e-3, 1.0)
    with pytest.raises(ConfigError, match="preset: 'mtdnn' is not a preset"):
        load_config({"preset": "mtdnn", "tasks": ["rte"], "data_dir": str(sample_data_dir)})


def test_siwlm_paper_preset_shapes_the_tasks_as_the_reference_code(sample_data_dir, tmp_path):
    from weightsearch.trainer.finetune import stage_config

    cfg = load_config({"preset": "siwlm-paper", "data_dir": str(sample_data_dir),
                       "weighting": {"central_weight": 9},
                       "tasks": ["stsb", "qnli", "rte", {"preset": "mrpc", "head": "linear"},
                                 "cola", {"preset": "qnli", "name": "qnli_b"}]})
    # The first listed task stays central; the others follow the published script's order
    # (mrpc, rte, cola, mnli, qnli, qqp, sst, stsb), a renamed preset after them.
    assert cfg.central_task == "stsb"
    assert cfg.task_names == ("stsb", "mrpc", "rte", "cola", "qnli", "qnli_b")
    heads = {t.name: (t.type, t.head, t.group) for t in cfg.tasks}
    assert heads == {
        "stsb": ("regression", "linear", None),
        "mrpc": ("classification", "linear", None),  # the task's own key wins
        "rte": ("classification", "san", None),
        "cola": ("classification", "linear", None),
        "qnli": ("classification", "san", None),  # QNLI as plain classification, with SAN
        "qnli_b": ("classification", "san", None),
    }
    # A task that sets its own type keeps all its own settings.
    own = load_config({"preset": "siwlm-paper", "data_dir": str(sample_data_dir),
                       "weighting": {"central_weight": 9},
                       "tasks": ["rte", {"preset": "qnli", "type": "ranking",
                                         "group": "question"}]})
    qnli = own.task("qnli")
    assert (qnli.type, qnli.group, qnli.head) == ("ranking", "question", "linear")
    # No tasks listed: the script's eight, MRPC (its first) central.
    every = load_config({"preset": "siwlm-paper", "data_dir": str(sample_data_dir),
                         "weighting": {"central_weight": 9}})
    assert every.task_names == ("mrpc", "rte", "cola", "mnli", "qnli", "qqp", "sst2", "stsb")
    assert [t.name for t in every.tasks if t.head == "san"] == ["mrpc", "rte", "mnli", "qnli",
                                                               "qqp"]
    # Fine-tuning puts a new linear head on the encoder (the script's answer_opt 0).
    rte = load_config({"preset": "siwlm-paper", "data_dir": str(sample_data_dir),
                       "weighting": {"central_weight": 9}, "tasks": ["rte", "mrpc"]})
    sub = stage_config(rte, "rte", tmp_path)
    assert sub.task_names == ("rte",) and sub.task("rte").head == "linear"
    assert rte.task("rte").head == "san"
    with pytest.raises(ConfigError, match=r"finetune.head: linear differs from the multi-"
                                          r"task head of rte.*finetune.heads: fresh"):
        load_config({"preset": "siwlm-paper", "data_dir": str(sample_data_dir),
                     "weighting": {"central_weight": 9}, "tasks": ["rte", "mrpc"],
                     "finetune": {"heads": "keep"}})


@pytest.mark.slow
def test_a_resume_that_restarts_the_multitask_stage_discards_stale_finetuning(
        sample_data_dir, tiny_encoder, tmp_path):
    out = tmp_path / "run"
    cfg = run_config(sample_data_dir, tiny_encoder, out, epochs=1,
                     finetune={"epochs": 1, "lr": 1e-4})
    train(cfg, quiet=True)
    shutil.rmtree(out / "checkpoints")
    (out / "finetune" / "rte" / "marker").write_text("stale")
    train(cfg, resume=True, quiet=True)
    assert not (out / "finetune" / "rte" / "marker").exists()
    assert (out / "finetune" / "rte" / "result.json").is_file()


@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_a_run_removes_no_finetune_folder_it_did_not_make(sample_data_dir, tiny_encoder,
                                                         tmp_path):
    out = tmp_path / "run"
    (out / "finetune").mkdir(parents=True)
    (out / "finetune" / "notes.txt").write_text("the user's")
    train(run_config(sample_data_dir, tiny_encoder, out, epochs=1), quiet=True)
    assert (out / "finetune" / "notes.txt").read_text() == "the user's"
    # A fine-tuning run would write into it: refused before anything is written.
    other = tmp_path / "other"
    (other / "finetune").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"finetune exists, but .* holds no run"):
        train(run_config(sample_data_dir, tiny_encoder, other, epochs=1,
                         finetune={"epochs": 1}), quiet=True)
    assert [p.name for p in other.iterdir()] == ["finetune"]


@pytest.mark.slow
def test_smart_works_on_a_compiled_encoder(sample_data_dir, tiny_encoder):
    """A compiled encoder ignores hooks added after it compiled; SMART's perturbed passes run
    the encoder's own module, so the term is the uncompiled one."""
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.model import MTDNN, load_encoder
    from weightsearch.trainer.smart import AdversarialSettings, smart_loss
    from weightsearch.trainer.task_data import collate, load_task_data

    cfg = run_config(sample_data_dir, tiny_encoder, "unused")
    tokenizer = load_tokenizer(tiny_encoder)
    data = load_task_data(cfg.task("rte"), cfg.data_dir, tokenizer, 64, None, 8)
    batch = collate(data.train, list(range(8)), tokenizer.pad_token_id)
    model = MTDNN(load_encoder(tiny_encoder, 1), cfg.tasks).eval()
    settings = AdversarialSettings(enabled=True, noise=1e-3, step_size=1e-2)
    clean = model("rte", batch).detach()
    torch.manual_seed(5)
    plain = smart_loss(model, "rte", batch, clean, settings)
    model.encoder = torch.compile(model.encoder, backend="eager", dynamic=True)
    model("rte", batch)  # compiled before the hook exists
    torch.manual_seed(5)
    compiled = smart_loss(model, "rte", batch, clean, settings)
    torch.testing.assert_close(compiled, plain, rtol=1e-4, atol=1e-9)


def test_smart_ascent_sums_over_the_batch_as_the_current_mt_dnn_code_with_stable_kl_sum(
        sample_data_dir, tiny_encoder):
    """`ascent: stable_kl_sum` climbs the reference's stable_kl summed over the batch (the
    current MT-DNN code's `reduce=False`), SIWLM's copy its mean: the gradient differs by the
    batch size, and so does the step once it is below the 1e-6 of the normalisation."""
    import torch.nn.functional as F

    from weightsearch.trainer.heads.base import stable_kl
    from weightsearch.trainer.smart import AdversarialSettings, smart_loss

    logits, target = torch.randn(8, 3, requires_grad=True), torch.randn(8, 3)
    (g_mean,) = torch.autograd.grad(stable_kl(logits, target), logits)
    (g_sum,) = torch.autograd.grad(stable_kl(logits, target, total=True), logits)
    torch.testing.assert_close(g_sum, g_mean * 8)
    p = F.softmax(logits, -1)
    r = lambda q: -(1.0 / (q + 1e-6) - 1 + 1e-6).log()  # noqa: E731
    expected = (p * (r(p).detach() - r(F.softmax(target, -1))) * 2).sum()
    torch.testing.assert_close(stable_kl(logits, target, total=True), expected)

    model, batch, clean = _rte_model_and_batch(sample_data_dir, tiny_encoder)
    terms = {}
    for ascent in ("stable_kl", "stable_kl_sum"):
        torch.manual_seed(5)
        terms[ascent] = smart_loss(model, "rte", batch, clean, AdversarialSettings(
            enabled=True, noise=1e-5, step_size=1e-3, ascent=ascent)).item()
    assert terms["stable_kl_sum"] != pytest.approx(terms["stable_kl"], rel=1e-3)
