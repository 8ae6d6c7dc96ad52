"""Benchmarks whose figures no test machine can produce still run: `benchmarks/bench_gpu.py
--device cpu --quick` end to end, with every row it promises in its JSON (BENCHMARKS.md
section 2 holds the GPU figures; none is asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, SAMPLE

ENCODERS = ("bert-base", "minilm")
# Rows a CPU runs with --quick, and rows it names as not run (with the reason).
RUN_ON_CPU = ("plain loop", "trainer eager", "packed 1", "packed 2", "fused 1", "fused 3")
NOT_RUN_ON_CPU = {"trainer compiled": "pass --compile", "compiled graphs": "pass --compile",
                  "trainer graphs": "CUDA graphs need a CUDA GPU",
                  "packed 4": "--quick on a CPU packs 1 and 2 processes only",
                  "packed 8": "--quick on a CPU packs 1 and 2 processes only",
                  "fused 6": "--fused 1,3 leaves it out", "fused 15": "--fused 1,3 leaves it out"}


@pytest.mark.slow  # three processes import torch: about 30 s of CPU, 50 s on a busy 2-core VM
def test_bench_gpu_quick_runs_every_row_on_the_cpu(tmp_path: Path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--device", "cpu",
         "--quick", "--data-dir", str(SAMPLE), "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["device"].startswith("cpu") and report["quick"]
    peak = report["matmul_peak"]
    assert peak["tflops"] > 0 and peak["dtype"] == report["precision"]
    assert f"matmul peak: {peak['tflops']:.2f} TFLOP/s measured ({peak['dtype']}" in proc.stdout
    for kind in ENCODERS:
        encoder = report["encoders"][kind]
        assert encoder["tiny"] and encoder["flops_per_sequence"] > 0
        assert set(encoder["rows"]) == {*RUN_ON_CPU, *NOT_RUN_ON_CPU}
        for name in RUN_ON_CPU:
            row = encoder["rows"][name]
            assert row["sequences_per_s"] > 0 and row["mfu"] > 0, (kind, name, row)
            assert row["peak_gpu_mib"] is None  # no GPU
        for members in (1, 3):
            row = encoder["rows"][f"fused {members}"]
            assert row["members"] == members and row["sequences"] == members * report["rows"]
            assert 0 < row["cpu_s_per_member"] * members == pytest.approx(row["cpu_s"])
        for name, reason in NOT_RUN_ON_CPU.items():
            assert reason in encoder["rows"][name]["not_run"]
            assert f"{kind:<10} {name:<17} not run: " in proc.stdout
        window = encoder["kernels"]["graphs"]  # eager steps on a CPU, profiled all the same
        assert window["steps"] > 0 and window["window_ms_per_step"] > 0, window
        assert f"{kind:<10} kernels/step (graphs) kernels: CUDA only" in proc.stdout
    targets = report["targets"]
    assert targets["MiniLM one trial >= 8,000 seq/s"]["figure"] > 0
    assert targets["fifteen fused MiniLM cells >= 30,000 seq/s (stretch)"] is None  # not run
    assert targets["BERT-base kernels per step <= 600"] is None  # CUDA only
    assert "targets (--quick: tiny shapes, not comparable):" in proc.stdout
    trial = report["realistic_trial"]
    assert trial["examples_per_s"] > 0 and trial["train_examples"] > 0, trial
    assert "realistic_trial_eager" not in report  # the defaults are eager on a CPU
    assert any(line.startswith("realistic trial (") and "examples/s" in line
               for line in proc.stdout.splitlines())
    assert "failed:" not in proc.stdout and "Traceback" not in proc.stderr


def _bench_gpu_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_gpu",
                                                  ROOT / "benchmarks" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_gpu"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_failing_row_is_reported_and_the_json_keeps_every_row_measured(tmp_path: Path,
                                                                        capsys):
    bench = _bench_gpu_module()

    def refused(shape: str) -> dict:
        raise RuntimeError(f"capture of {shape} refused")

    row = bench.attempt(refused, "32 x 128")
    assert row == {"not_run": "failed: RuntimeError: capture of 32 x 128 refused"}
    assert "Traceback" in capsys.readouterr().err  # the cause is not lost either
    assert bench.attempt(lambda: {"x": 1}) == {"x": 1}

    out = tmp_path / "gpu.json"
    args = type("Args", (), {"json": str(out)})()
    bench.save_json(args, {"rows": {"plain loop": {"sequences_per_s": 1.0}}})
    bench.save_json(args, {"rows": {"plain loop": {"sequences_per_s": 1.0}, "next": row}})
    assert json.loads(out.read_text())["rows"]["next"] == row
    assert [p.name for p in tmp_path.iterdir()] == ["gpu.json"]  # no .part left behind


@pytest.mark.slow  # two encoders, four short runs each: about 20 s of CPU
def test_gpu_steady_quick_runs_on_the_cpu(tmp_path: Path):
    out = tmp_path / "steady.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_steady.py"), "--device", "cpu",
         "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    for kind in ENCODERS:
        rows = report["encoders"][kind]
        for name in ("as is", "precollated", "as is (again)"):
            assert rows[name]["sequences_per_s"] > 0, (kind, name, rows[name])
            # the same seed on a CPU: the very same losses, collated ahead or not
            assert rows[name]["loss_spread_vs_first"] == 0.0
        window = rows["profiled window"]
        assert window["steps"] > 0 and window["window_ms_per_step"] > 0
        assert "compiled + graphs" not in rows  # CUDA only


def test_device_busy_time_counts_overlapping_spans_once():
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("profile_window",
                                                  ROOT / "benchmarks" / "profile_window.py")
    steady = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(steady)

    def span(start: float, end: float) -> SimpleNamespace:
        return SimpleNamespace(time_range=SimpleNamespace(start=start, end=end))

    # a kernel reported inside a longer device span, one overlapping it, one apart
    spans = [span(10, 20), span(0, 30), span(25, 40), span(50, 55)]
    assert steady.busy_us(spans) == 45.0  # [0, 40] and [50, 55]
    assert steady.busy_us([]) == 0.0
