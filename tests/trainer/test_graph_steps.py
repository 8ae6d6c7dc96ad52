"""CUDA graph steps (`weightsearch.trainer.graphs`, `cuda_graphs`).

On the CPU the graph step runs without capture (`GraphPlan(True, capture=False)`): the same
fixed input tensors, gradients made by the step and spent within it, the capturable optimizer
with its learning rate as a device scalar that the schedule fills, the readings copied out after
each step. Such a run must train as the eager loop does. The tests marked `gpu` capture for real.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import assert_replays_draw_new_masks, run_config
from tests.trainer.test_static_shapes import no_dropout_encoder
from weightsearch.core.errors import ConfigError
from weightsearch.trainer.device import Runtime, select_runtime
from weightsearch.trainer.graphs import WARMUP_STEPS, GraphPlan, plan_graphs
from weightsearch.trainer.heads.ranking import RankingHead
from weightsearch.trainer.loop import set_up, train_stage
from weightsearch.trainer.optim import (
    AdamaxW,
    load_optimizer_state,
    make_capturable,
    portable_state,
)

EMULATED = GraphPlan(True, capture=False)
READINGS = ("loss", "grad_norm", "clip_scale")


def steps_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]


def final_weights(folder: Path) -> dict[str, torch.Tensor]:
    newest = sorted((folder / "checkpoints").glob("epoch-*"))[-1]
    return load_file(str(newest / "model.safetensors"))


def assert_same_training(ours: Path, theirs: Path, rel: float = 1e-4) -> None:
    mine, other = steps_of(ours), steps_of(theirs)
    assert [(s["task"], s["weight"], s["lr"]) for s in mine] == \
        [(s["task"], s["weight"], s["lr"]) for s in other]
    for a, b in zip(mine, other, strict=True):
        for key in READINGS:
            assert a[key] == pytest.approx(b[key], rel=rel, abs=1e-6), (a["global_step"], key)
    wa, wb = final_weights(ours), final_weights(theirs)
    assert wa.keys() == wb.keys()
    for name in wb:
        torch.testing.assert_close(wa[name], wb[name], rtol=rel, atol=1e-5)


# ---- the optimizer ------------------------------------------------------------------------

@pytest.mark.parametrize("bias_correction", [True, False])
def test_capturable_adamaxw_takes_the_eager_steps(bias_correction):
    """The capturable AdamaxW (every number on the device, the learning rate a tensor the
    schedule fills) updates as the eager one, decoupled weight decay included."""
    torch.manual_seed(0)
    shapes = [(4, 3), (3,), (5, 2)]
    start = [torch.randn(s) for s in shapes]
    grads = [[torch.randn(s) for s in shapes] for _ in range(12)]

    def trained(capturable: bool) -> list[torch.Tensor]:
        params = [torch.nn.Parameter(p.clone()) for p in start]
        groups = [{"params": params[:2], "decoupled_weight_decay": 0.01},
                  {"params": params[2:], "decoupled_weight_decay": 0.0}]
        opt = AdamaxW(groups, lr=2e-2, bias_correction=bias_correction, capturable=capturable)
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
        if capturable:
            make_capturable(opt, torch.device("cpu"))
            assert all(isinstance(g["lr"], torch.Tensor) for g in opt.param_groups)
        for step_grads in grads:
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.clone()
            opt.step()
            schedule.step()
        return [p.detach() for p in params]

    for eager, graphed in zip(trained(False), trained(True), strict=True):
        torch.testing.assert_close(graphed, eager, rtol=1e-5, atol=1e-7)


def test_a_saved_state_loads_into_an_eager_optimizer_and_back():
    params = [torch.nn.Parameter(torch.ones(3))]
    opt = AdamaxW([{"params": params}], lr=1e-3, capturable=True)
    make_capturable(opt, torch.device("cpu"))
    params[0].grad = torch.ones(3)
    opt.step()
    saved = portable_state(opt)
    assert saved["param_groups"][0]["lr"] == pytest.approx(1e-3)
    assert not isinstance(saved["param_groups"][0]["lr"], torch.Tensor)
    assert saved["param_groups"][0]["capturable"] is False
    eager = AdamaxW([{"params": [torch.nn.Parameter(torch.ones(3))]}], lr=5.0)
    eager.load_state_dict(saved)
    assert eager.param_groups[0]["lr"] == pytest.approx(1e-3)
    again = AdamaxW([{"params": [torch.nn.Parameter(torch.ones(3))]}], lr=5.0, capturable=True)
    again.load_state_dict(saved)
    make_capturable(again, torch.device("cpu"))
    group = again.param_groups[0]
    assert group["capturable"] and float(group["lr"]) == pytest.approx(1e-3)
    state = next(iter(again.state.values()))
    assert state["step"].dtype == torch.float32 and float(state["step"]) == 1.0


# ---- when graphs run -----------------------------------------------------------------------

def test_graphs_stay_off_on_a_cpu_and_on_is_refused(sample_data_dir, tiny_encoder, tmp_path):
    runtime = select_runtime("cpu", "fp32")
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run")
    plan = plan_graphs(cfg, runtime)
    assert not plan.enabled and "CUDA" in plan.why_not
    off = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", cuda_graphs="off")
    assert not plan_graphs(off, runtime).enabled
    on = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", cuda_graphs="on")
    with pytest.raises(ConfigError, match="cuda_graphs: on, but the run trains on cpu"):
        plan_graphs(on, runtime)
    with pytest.raises(ConfigError, match="cuda_graphs"):
        run_config(sample_data_dir, tiny_encoder, tmp_path / "run", cuda_graphs="yes")


def test_a_cpu_run_keeps_dynamic_shapes_and_the_eager_loop(sample_data_dir, tiny_encoder,
                                                           tmp_path):
    run = set_up(run_config(sample_data_dir, tiny_encoder, tmp_path / "run"))
    assert run.graphs is None
    assert all(not d.train_widths and not d.eval_widths for d in run.data.values())
    assert all(not isinstance(g["lr"], torch.Tensor) for g in run.optimizer.param_groups)


# ---- a run of graph steps ---------------------------------------------------------------

@pytest.fixture(scope="module")
def eager_run(sample_data_dir, tiny_encoder, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("graphs") / "eager"
    cfg = run_config(sample_data_dir, tiny_encoder, out, pad_to="buckets", checkpoints="all")
    train_stage(set_up(cfg), quiet=True)
    return out


def test_graph_steps_train_as_the_eager_loop(sample_data_dir, tiny_encoder, tmp_path,
                                             eager_run):
    """Every step's loss, gradient norm and clip factor, and the final weights: the graph
    steps (run without capture; AdamaxW, the default: torch's capturable optimizers run on
    CUDA only, the gpu tests) against the eager loop, dropout on. Each shape's first steps
    are eager, then its graph takes the rest."""
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "graphs", pad_to="buckets",
                     checkpoints="all")
    run = set_up(cfg, graphs=EMULATED)
    graphs = run.graphs
    assert graphs is not None
    stepped: dict[str, set[str]] = {}  # each task's parameters with a gradient at its update
    update = graphs.update

    def recording_update(task, batch, weight):
        readings = update(task, batch, weight)
        stepped.setdefault(task, set()).update(
            n for n, p in run.model.named_parameters() if p.grad is not None)
        return readings

    graphs.update = recording_update
    train_stage(run, quiet=True)
    steps = sum(len(p) for p in run.plans.values())
    shapes = {key for key in graphs.seen}
    assert set(graphs.graphs) <= shapes
    for key in graphs.graphs:  # captured after exactly WARMUP_STEPS eager steps
        assert graphs.seen[key] == WARMUP_STEPS
    replayed = steps - sum(graphs.seen.values())
    assert replayed > 0
    assert "step shapes captured" in graphs.summary()
    # Each task's graph step trains the encoder and its own head only.
    assert set(stepped) == set(run.data)
    for task, names in stepped.items():
        others = [t for t in stepped if t != task]
        assert any(f".{task}." in f".{n}." for n in names), task
        assert any(n.startswith("encoder.") for n in names), task
        assert not any(f".{other}." in f".{n}." for n in names for other in others), task
    assert_same_training(tmp_path / "graphs", eager_run)


@pytest.mark.slow
def test_a_graph_run_resumes_eagerly_and_an_eager_one_with_graphs(sample_data_dir,
                                                                  tiny_encoder, tmp_path,
                                                                  eager_run):
    """Checkpoints keep plain learning rates: either way round, the resumed run finishes as
    the uninterrupted one."""
    for name, first, second in (("g-then-e", EMULATED, None), ("e-then-g", None, EMULATED)):
        out = tmp_path / name
        cfg = run_config(sample_data_dir, tiny_encoder, out, pad_to="buckets",
                         checkpoints="all")
        train_stage(set_up(cfg, graphs=first), quiet=True)
        shutil.rmtree(out / "checkpoints" / "epoch-002")  # as if killed in epoch 2
        (out / "result.json").unlink(missing_ok=True)
        resumed = set_up(cfg, resume=True, graphs=second)
        assert resumed.ckpt is not None and resumed.ckpt.epoch == 1
        train_stage(resumed, quiet=True)
        assert_same_training(out, eager_run)


# ---- on a CUDA GPU: the real capture --------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("optimizer", ["adamax", "adamw", "radam"])
def test_captured_graphs_train_as_the_eager_loop_on_cuda(sample_data_dir, tmp_path, optimizer):
    """Without dropout (the captured graph draws its own masks), a run of captured steps
    trains as the eager one: the padded and unpadded batches, the schedule's learning rate
    and each task's head. In fp32: under bf16 an unpadded eager batch may take another
    attention kernel than its captured twin, which always builds the mask."""
    encoder = no_dropout_encoder(tmp_path)
    tasks = [{"preset": name, "dropout": 0.0} for name in ("rte", "mrpc", "stsb")]
    runs = {}
    for mode in ("off", "on"):
        cfg = run_config(sample_data_dir, encoder, tmp_path / mode, tasks=tasks, device="cuda",
                         pad_to="buckets", cuda_graphs=mode, checkpoints="all",
                         optimizer=optimizer, precision="fp32")
        runs[mode] = set_up(cfg)
        train_stage(runs[mode], quiet=True)
    graphs = runs["on"].graphs
    assert graphs is not None and graphs.graphs and not graphs.eager_keys
    assert_same_training(tmp_path / "on", tmp_path / "off", rel=1e-3)


@pytest.mark.gpu
@cuda
def test_captured_dropout_draws_new_masks_every_replay(sample_data_dir, tiny_encoder, tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", device="cuda",
                     pad_to="buckets", cuda_graphs="on", epochs=3)
    run = set_up(cfg)
    train_stage(run, quiet=True)
    assert run.graphs is not None and run.graphs.graphs
    losses = [s["loss"] for s in steps_of(tmp_path / "run")]
    assert len(set(losses)) == len(losses)
    # The losses differ anyway (the weights move); what shows new masks is the random state.
    assert_replays_draw_new_masks(run)


@pytest.mark.parametrize(("text", "value"), [("on", "on"), ("off", "off"), ("true", "on"),
                                             ("no", "off"), ("auto", "auto"), ("'On'", "on")])
def test_yaml_reads_a_bare_on_or_off_as_the_switch(sample_data_dir, tiny_encoder, tmp_path,
                                                   text, value):
    """YAML 1.1 reads a bare on/off/yes/no as a boolean; the setting takes it as on or off."""
    import yaml

    raw = yaml.safe_load(f"cuda_graphs: {text}")
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", **raw)
    assert cfg.cuda_graphs == value


# ---- what keeps a run, or a task, eager --------------------------------------------------

class _NotCapturable:
    capturable = False


CUDA_RUNTIME = Runtime(torch.device("cuda"), None)  # a plan only: nothing runs on it


@pytest.mark.parametrize(("setting", "reason"), [
    ({"pad_to": "longest"}, "pad_to: longest"),
    ({"adversarial": {"enabled": True}}, "SMART"),
    ({"compile": True}, "compile: true"),
    ({"recompute_activations": True}, "recompute_activations"),
])
def test_what_keeps_a_cuda_run_eager(sample_data_dir, tiny_encoder, tmp_path, setting, reason):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", **setting)
    plan = plan_graphs(cfg, CUDA_RUNTIME)
    assert not plan.enabled and reason in plan.why_not
    strict = cfg.replace(cuda_graphs="on")
    with pytest.raises(ConfigError, match=f"cuda_graphs: on, but .*{reason}"):
        plan_graphs(strict, CUDA_RUNTIME)


def test_a_scheme_that_is_not_capturable_keeps_the_run_eager(sample_data_dir, tiny_encoder,
                                                             tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run")
    assert plan_graphs(cfg, CUDA_RUNTIME).enabled  # on CUDA, the defaults capture
    plan = plan_graphs(cfg, CUDA_RUNTIME, _NotCapturable())
    assert not plan.enabled and "'siwlm' is not capturable" in plan.why_not


def test_the_cpu_check_refuses_torchs_capturable_optimizers(sample_data_dir, tiny_encoder,
                                                            tmp_path):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", optimizer="adamw")
    with pytest.raises(ConfigError, match="capturable adamw runs on CUDA only"):
        set_up(cfg, graphs=EMULATED)
    assert not (tmp_path / "run").exists()


def _data_with_a_ranking_task(sample_data_dir: Path, root: Path) -> Path:
    data = root / "data"
    shutil.copytree(sample_data_dir / "RTE", data / "RTE")
    lines = ["index\tquestion\tsentence\tlabel"]
    for i in range(96):
        label = "entailment" if i % 3 == 0 else "not_entailment"
        lines.append(f"{i}\tquestion {i // 4}\t{'word ' * (1 + i % 17)}\t{label}")
    (data / "q.tsv").write_text("\n".join(lines) + "\n")
    return data


@pytest.mark.slow  # two runs of four tasks' worth of steps each: about 4 s apiece
@pytest.mark.parametrize("capturable", [True, False])
def test_a_ranking_task_as_graphs_or_eagerly_beside_graphed_ones(sample_data_dir, tiny_encoder,
                                                                 tmp_path, monkeypatch,
                                                                 capturable):
    """Ranking's loss numbers its lists on the device, so its steps are graphs too; a head
    type that says it is not capturable trains eagerly beside the graphed ones. Either way the
    run trains as the eager one."""
    monkeypatch.setattr(RankingHead, "capturable", capturable)
    data = _data_with_a_ranking_task(sample_data_dir, tmp_path)
    tasks = ["rte", {"preset": "qnlirank", "name": "rank", "train_file": "q.tsv",
                     "dev_files": {"dev": "q.tsv"}}]
    runs = {}
    for name, plan in (("eager", None), ("graphs", EMULATED)):
        cfg = run_config(data, tiny_encoder, tmp_path / name, tasks=tasks, pad_to="buckets",
                         checkpoints="all", max_train_examples=None)
        runs[name] = set_up(cfg, graphs=plan)
        train_stage(runs[name], quiet=True)
    graphs = runs["graphs"].graphs
    assert graphs is not None
    assert {task for task, _ in graphs.graphs} == ({"rte", "rank"} if capturable else {"rte"})
    assert ("eager: rank" in graphs.summary()) is not capturable
    assert_same_training(tmp_path / "graphs", tmp_path / "eager")


def test_a_checkpoint_keeps_the_loading_optimizers_implementation():
    """A foreach AdamW's state loaded into a fused one stays fused (torch would take foreach
    from the saved groups)."""
    def adamw(**implementation):
        p = torch.nn.Parameter(torch.ones(4))
        return p, torch.optim.AdamW([p], lr=1e-3, **implementation)

    p, foreach = adamw(foreach=True)
    p.grad = torch.ones(4)
    foreach.step()
    _, fused = adamw(fused=True)
    load_optimizer_state(fused, portable_state(foreach))
    group = fused.param_groups[0]
    assert group["fused"] is True and not group.get("foreach")
    state = next(iter(fused.state.values()))
    assert float(state["step"]) == 1.0 and state["step"].dtype == torch.float32


@pytest.mark.slow  # a tiny end-to-end run: several CPU-seconds
def test_a_finished_graph_run_frees_its_model_without_the_garbage_collector(
        sample_data_dir, tiny_encoder, tmp_path, monkeypatch):
    """The graph steps and the run point at each other: `train` breaks that link when the
    stage ends, so the model, optimizer and graphs go at once, not when the collector runs
    (on a GPU, while the fine-tuning stage loads its own model)."""
    import gc
    import weakref

    from weightsearch.trainer import pipeline

    made = []

    def with_graph_steps(*args, **kwargs):
        run = set_up(*args, graphs=EMULATED, **kwargs)
        made.append((weakref.ref(run.model), weakref.ref(run.optimizer), run.graphs))
        return run

    monkeypatch.setattr(pipeline, "set_up", with_graph_steps)
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", pad_to="buckets")
    gc.collect()
    gc.disable()
    try:
        pipeline.train(cfg, quiet=True)
        model, optimizer, graphs = made[0]
        assert graphs.graphs == {} and graphs.run is None  # it did capture, then let go
        assert model() is None and optimizer() is None
    finally:
        gc.enable()
