"""Where a trial's GPU time goes once it is warm: the trainer's steady-state speed, an upper
bound on what moving batch collation off the step would give, and a profiler window.

    python benchmarks/gpu_steady.py [--rows 4000] [--compiled] [--json OUT]   # on a CUDA GPU
    python benchmarks/gpu_steady.py --device cpu --quick                      # checks it

For the BERT-base and MiniLM shapes of `bench_gpu.py` (random init, synthetic pairs that fill
--seq-len; every batch 32 x 128), after one warm-up run in the same process (CUDA, cuBLAS and
cuDNN set up once, as in a Ray worker's later trials), it measures:
- "as is": `weightsearch.trainer.train`, CUDA graphs on (eager on a CPU), twice;
- "precollated": the same with every batch of the epoch collated and on the device before the
  epoch starts (outside the timed span): if this is no faster, the host's batch work is not
  what the GPU waits for;
- a profiler window of 20 steady steps: the device's busy time per step, kernels per step, and
  the top kernels and host ops;
- with --compiled (CUDA only): `compile: true` inside the captured step. The trainer keeps
  that pairing eager until its gpu tests pass (`graphs.COMPILE_IN_GRAPHS`); this measurement
  opts in through the environment, and reports a first run (which compiles) and a second.

Each run's step losses are compared with the first run's (the spread shows the run-to-run
nondeterminism of the GPU kernels). Needs torch, transformers, datasets and the trainer.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

_spec = importlib.util.spec_from_file_location("bench_gpu",
                                               Path(__file__).with_name("bench_gpu.py"))
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_gpu"] = bench  # its dataclasses look their module up there
_spec.loader.exec_module(bench)
profiled_window = bench.sibling("profile_window").profiled_window

from weightsearch.trainer import graphs as graph_steps  # noqa: E402
from weightsearch.trainer import loop, stage_output  # noqa: E402
from weightsearch.trainer import step as training_step  # noqa: E402
from weightsearch.trainer.encoders import default_encoder_path, load_tokenizer  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--rows", type=int, help="synthetic rows a run: 4000 (640 with --quick)")
    p.add_argument("--quick", action="store_true", help="tiny shapes, 64 tokens")
    p.add_argument("--compiled", action="store_true", help="also compile inside the graphs")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args()
    args.rows = args.rows or (640 if args.quick else 4000)
    return args


def precollated(train_epoch: Any) -> Any:
    """`loop._train_epoch` with the epoch's batches collated and moved before it starts."""
    def epoch(run: Any, number: int, *rest: Any, **kw: Any) -> Any:
        ready = {(task, idx.tobytes()): training_step.step_batch(run, task, idx)
                 for task, idx in run.plans[number]}
        if run.runtime.device.type == "cuda":
            torch.cuda.synchronize()
        collate = training_step.step_batch
        training_step.step_batch = lambda _run, task, idx: ready[(task, idx.tobytes())]
        try:
            return train_epoch(run, number, *rest, **kw)
        finally:
            training_step.step_batch = collate
    return epoch


def timed_run(encoder: str, syn: Any, folder: Path, graphs: str, compiled: bool = False
              ) -> dict:
    row = bench.attempt(bench.trainer_row, encoder, syn, str(folder), compiled, graphs)
    if "not_run" not in row:
        row["losses"] = [json.loads(line)["loss"]
                         for line in (folder / stage_output.STEPS).read_text().splitlines()]
    return row


def measure(args: argparse.Namespace, tmp: Path) -> dict:
    cuda = args.device == "cuda"
    graphs = "on" if cuda else "off"
    seq = 64 if args.quick else 128
    tokenizer = load_tokenizer(default_encoder_path())
    bench.write_synthetic_task(tmp / "data" / "syn", tokenizer, args.rows, seq)
    syn = bench.Synthetic(str(tmp / "data"), str(tmp / "cache"), args.rows, 32, seq,
                          args.device, 1 if args.quick and not cuda else None)
    report: dict = {"device": bench.device_name(args.device), "rows": args.rows, "batch": 32,
                    "seq_len": seq, "encoders": {}}
    print(f"device: {report['device']}; {args.rows} rows a run, batches 32 x {seq}")
    for kind in bench.KINDS:
        encoder = bench.build_encoder(kind, tmp / kind, args.quick, tokenizer)
        bench.trainer_row(encoder, syn, str(tmp / f"warm-{kind}"), False, graphs)
        rows: dict[str, Any] = {}
        first: list[float] | None = None
        for name in ("as is", "precollated", "as is (again)"):
            epoch = loop._train_epoch
            loop._train_epoch = precollated(epoch) if name == "precollated" else epoch
            try:
                row = timed_run(encoder, syn, tmp / f"{kind}-{len(rows)}", graphs)
            finally:
                loop._train_epoch = epoch
            rows[name] = row
            if "not_run" in row:
                print(f"{kind:<10} {name:<16} {row['not_run']}")
                continue
            first = first or row["losses"]
            spread = max(abs(a - b) for a, b in zip(first, row["losses"], strict=True))
            row["loss_spread_vs_first"] = spread
            print(f"{kind:<10} {name:<16} {row['sequences_per_s']:>9.1f} seq/s  "
                  f"(losses within {spread:.2g} of the first run's)")
        steps = min(20, args.rows // 32 // 3)
        folder = str(tmp / f"{kind}-profiled")
        window = profiled_window(
            lambda e=encoder, f=folder: bench.trainer_row(e, syn, f, False, graphs),
            cuda, args.rows // 32, steps)
        rows["profiled window"] = {k: v for k, v in window.items() if k != "tables"}
        print(f"{kind:<10} profiled window  device busy {window['device_busy_ms_per_step']:.2f} "
              f"ms/step, {window['kernels_per_step']:.0f} kernels/step, wall "
              f"{window['window_ms_per_step']:.2f} ms/step under the profiler")
        print(window["tables"])
        if args.compiled and cuda:
            rows["compiled + graphs"] = compiled_runs(kind, encoder, syn, tmp)
        for row in rows.values():
            row.pop("losses", None)
        report["encoders"][kind] = rows
    return report


def compiled_runs(kind: str, encoder: str, syn: Any, tmp: Path) -> dict:
    """`compile: true` inside the captured step (opted in through the environment, as the
    trainer's gpu tests do until it is on for everyone)."""
    import os

    previous = os.environ.get(graph_steps.COMPILE_IN_GRAPHS_ENV)
    os.environ[graph_steps.COMPILE_IN_GRAPHS_ENV] = "1"
    try:
        out = {}
        for attempt in ("first (compiles)", "second"):
            start = time.perf_counter()
            row = timed_run(encoder, syn, tmp / f"{kind}-compiled-{len(out)}", "on", True)
            row["wall_s"] = time.perf_counter() - start
            out[attempt] = {k: v for k, v in row.items() if k != "losses"}
            shown = row.get("not_run") or f"{row['sequences_per_s']:.1f} seq/s"
            print(f"{kind:<10} compiled+graphs {attempt}: {shown} (wall {row['wall_s']:.1f} s)")
        return out
    finally:
        if previous is None:
            os.environ.pop(graph_steps.COMPILE_IN_GRAPHS_ENV)
        else:
            os.environ[graph_steps.COMPILE_IN_GRAPHS_ENV] = previous


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-steady-") as name:
        report = measure(args, Path(name))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
