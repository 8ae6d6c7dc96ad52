"""`compile: true` inside the graph steps (`weightsearch.trainer.graphs`), for single trials,
and the fused cells' step on a GPU.

On the CPU the compiled encoder runs inside the graph step without capture: the same fixed
tensors, the same compiled code, which must train as the compiled eager loop and compile
nothing new once every shape has been seen. The tests marked `gpu` capture for real: what
`graphs.COMPILE_IN_GRAPHS` waits for (until then they opt in through the environment, as a
user may): equivalence with the eager loop within bf16 rounding over the run, new dropout masks
at every replay, and the compiles counted. Fused cells train every member in one eager stacked
step (`fused.NO_GRAPHS`, and a compiled encoder is not stacked); their gpu test checks that
step against the members' stand-alone runs in bf16.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import assert_replays_draw_new_masks, run_config
from tests.trainer.test_static_shapes import no_dropout_encoder
from weightsearch.core.errors import ConfigError
from weightsearch.trainer import train, train_fused
from weightsearch.trainer.graphs import COMPILE_IN_GRAPHS_ENV, GraphPlan, plan_graphs
from weightsearch.trainer.loop import set_up, train_stage
from weightsearch.trainer.results import EpochReport

EMULATED = GraphPlan(True, capture=False)
READINGS = ("loss", "grad_norm", "clip_scale")
NO_DROPOUT_TASKS = [{"preset": name, "dropout": 0.0} for name in ("rte", "mrpc", "stsb")]


def steps_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]


def compiled_frames() -> int:
    """Frames dynamo has compiled in this process so far (a recompile is one more)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def trained_counting_compiles(run) -> list[int]:
    """Train `run`; the frames compiled by the end of each epoch (its evaluation included)."""
    at_epoch_end: list[int] = []
    torch._dynamo.reset()  # compiled afresh: a run's counts are its own
    start = compiled_frames()

    def count(_: EpochReport) -> None:
        at_epoch_end.append(compiled_frames() - start)

    train_stage(run, report=count, quiet=True)
    return at_epoch_end


def assert_same_steps(ours: Path, theirs: Path, rel: float) -> None:
    mine, other = steps_of(ours), steps_of(theirs)
    assert [(s["task"], s["weight"]) for s in mine] == [(s["task"], s["weight"]) for s in other]
    for a, b in zip(mine, other, strict=True):
        for key in READINGS:
            assert a[key] == pytest.approx(b[key], rel=rel, abs=1e-6), (a["global_step"], key)


# ---- on the CPU: the compiled step without capture -----------------------------------------

def test_compile_keeps_a_cuda_run_eager_until_opted_in(sample_data_dir, tiny_encoder, tmp_path,
                                                       monkeypatch):
    from weightsearch.trainer.device import Runtime

    cuda = Runtime(torch.device("cuda"), None)  # a plan only: nothing runs on it
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", compile=True)
    monkeypatch.delenv(COMPILE_IN_GRAPHS_ENV, raising=False)
    plan = plan_graphs(cfg, cuda)
    assert not plan.enabled and "not yet tested on a GPU" in plan.why_not
    with pytest.raises(ConfigError, match=f"inside CUDA graphs.*{COMPILE_IN_GRAPHS_ENV}=1"):
        plan_graphs(cfg.replace(cuda_graphs="on"), cuda)
    monkeypatch.setenv(COMPILE_IN_GRAPHS_ENV, "1")
    assert plan_graphs(cfg, cuda).enabled


@pytest.mark.slow  # two compiled runs: about 30 CPU-seconds each, most of it compiling
def test_compiled_graph_steps_train_as_the_compiled_eager_loop(sample_data_dir, tiny_encoder,
                                                               tmp_path):
    """Dropout on: both draw the compiled code's masks from the same generator. Every shape
    is met in the first epoch, so later epochs compile nothing."""
    compiles = {}
    for name, plan in (("eager", None), ("graphs", EMULATED)):
        cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / name, pad_to="buckets",
                         compile=True, epochs=3)
        run = set_up(cfg, graphs=plan)
        compiles[name] = trained_counting_compiles(run)
        if plan is not None:
            assert run.graphs is not None and run.graphs.graphs  # the graph steps took steps
    for counts in compiles.values():
        assert 0 < counts[0] == counts[-1], compiles  # nothing after the first epoch
        assert counts[0] <= 8, compiles  # dynamic shapes: not one compile per bucket and task
    assert_same_steps(tmp_path / "graphs", tmp_path / "eager", rel=1e-5)


# ---- on a CUDA GPU: the real capture --------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def compile_in_graphs(monkeypatch):
    monkeypatch.setenv(COMPILE_IN_GRAPHS_ENV, "1")


@pytest.mark.gpu
@cuda
def test_compiled_captured_steps_train_as_the_eager_loop_within_bf16_rounding(
        sample_data_dir, tmp_path, compile_in_graphs):
    """Without dropout (the compiled graph draws masks of its own), 3 epochs of compiled and
    captured steps against the eager loop, both in bf16: each step's readings differ from the
    eager step's by no more than bf16 differs from fp32 on the same steps (twice that, or
    2^-7 where that is smaller), and after the first epoch nothing compiles."""
    encoder = no_dropout_encoder(tmp_path)
    common = {"tasks": NO_DROPOUT_TASKS, "device": "cuda", "pad_to": "buckets", "epochs": 3}
    compiles = None
    for name, extra in (("fp32", {"cuda_graphs": "off"}),
                        ("eager", {"cuda_graphs": "off", "precision": "bf16"}),
                        ("compiled", {"cuda_graphs": "on", "precision": "bf16",
                                      "compile": True})):
        run = set_up(run_config(sample_data_dir, encoder, tmp_path / name, **common, **extra))
        counts = trained_counting_compiles(run)
        if name == "compiled":
            compiles = counts
            graphs = run.graphs
            assert graphs is not None and graphs.graphs and graphs.failed is None
    assert compiles is not None and 0 < compiles[0] == compiles[-1], compiles
    fp32, eager, compiled = (steps_of(tmp_path / n) for n in ("fp32", "eager", "compiled"))
    for key in READINGS:
        rounding = max(abs(e[key] - f[key]) / max(abs(f[key]), 1e-6)
                       for e, f in zip(eager, fp32, strict=True))
        for ours, theirs in zip(compiled, eager, strict=True):
            assert ours[key] == pytest.approx(theirs[key], rel=max(2 * rounding, 2**-7),
                                              abs=1e-6), (ours["global_step"], key)


@pytest.mark.gpu
@cuda
def test_compiled_captured_dropout_draws_new_masks_every_replay(sample_data_dir, tiny_encoder,
                                                                tmp_path, compile_in_graphs):
    """The compiled code's masks come from seeds drawn on the device inside the graph: the
    CUDA generator moves on at each replay (a seed baked in at capture would not move it)."""
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", device="cuda",
                     pad_to="buckets", cuda_graphs="on", compile=True, epochs=2)
    run = set_up(cfg)
    train_stage(run, quiet=True)
    assert run.graphs is not None and run.graphs.graphs and run.graphs.failed is None
    losses = [s["loss"] for s in steps_of(tmp_path / "run")]
    assert len(set(losses)) == len(losses)
    assert_replays_draw_new_masks(run)


@pytest.mark.gpu
@cuda
def test_fused_cells_train_as_their_stand_alone_runs_on_cuda_within_bf16_rounding(
        sample_data_dir, tmp_path):
    """Three members (SIWLM weights 1, 9, 15) against their stand-alone eager runs, bf16,
    without dropout (a stand-alone SDPA kernel draws masks of its own on a GPU), 2 epochs."""
    encoder = no_dropout_encoder(tmp_path)

    def configs(tag: str) -> list:
        return [run_config(sample_data_dir, encoder, tmp_path / f"{tag}-{w}",
                           tasks=NO_DROPOUT_TASKS, device="cuda", precision="bf16",
                           cuda_graphs="off", weighting={"scheme": "siwlm",
                                                         "central_weight": w, "focus_span": 2})
                for w in (1, 9, 15)]

    for cfg in configs("alone"):
        train(cfg, quiet=True)
    results = train_fused(configs("fused"), quiet=True)
    assert not any(isinstance(r, BaseException) for r in results), results
    for w in (1, 9, 15):
        assert_same_steps(tmp_path / f"fused-{w}", tmp_path / f"alone-{w}", rel=2**-6)
