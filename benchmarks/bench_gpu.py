"""GPU throughput of the real trainer: sequences/s, model FLOP utilisation, trial packing.

One command, on a machine with a CUDA GPU:

    python benchmarks/bench_gpu.py   # BERT-base shape + MiniLM, then 1/2/4 packed MiniLM trials

Every figure comes from `weightsearch.trainer.train` on synthetic sentence pairs that fill
`--seq-len` tokens (so each batch is exactly seq_len long and FLOPs are known), bf16 autocast, TF32,
SDPA attention, fused AdamW. MFU = achieved model FLOP/s / peak, with model FLOPs per trained
sequence = 6 * (non-embedding parameters) * seq_len + 12 * layers * hidden * seq_len^2 (forward and
backward, attention scores included). Peak is measured on the spot with a large bf16 matmul,
and the datasheet dense bf16 peak (989 TFLOP/s for an H100 SXM) is shown beside it.
`--device cpu --quick` runs the same code on a CPU, to check the script without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = ("the", "model", "reads", "every", "token", "of", "a", "long", "sentence", "pair", "so",
         "that", "batch", "is", "full", "and", "attention", "covers", "whole", "window")


def write_synthetic_task(folder: Path, rows: int, seq_len: int) -> None:
    """Sentence pairs long enough to be truncated to exactly seq_len tokens."""
    import random

    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    n_words = seq_len  # each word is at least one token: the pair always overflows
    for split, n in (("train", rows), ("dev", 64)):
        lines = ["sentence1\tsentence2\tlabel"]
        for _ in range(n):
            a = " ".join(rng.choice(WORDS) for _ in range(n_words))
            b = " ".join(rng.choice(WORDS) for _ in range(n_words))
            lines.append(f"{a}\t{b}\t{rng.randint(0, 1)}")
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")


def save_encoder(kind: str, path: Path) -> str:
    """BERT-base shape (random init: FLOPs do not depend on the weights), or the real MiniLM."""
    from weightsearch.trainer.encoders import default_encoder_path

    if kind == "minilm":
        return default_encoder_path()
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(default_encoder_path())
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=768, num_hidden_layers=12,
                     num_attention_heads=12, intermediate_size=3072)
    BertModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def flops_per_sequence(encoder_path: str, seq_len: int) -> float:
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(encoder_path)
    h, layers, inter = c.hidden_size, c.num_hidden_layers, c.intermediate_size
    per_layer = 4 * h * h + 2 * h * inter  # attention projections + feed-forward weights
    params = layers * per_layer + h * h  # + pooler
    return 6.0 * params * seq_len + 12.0 * layers * h * seq_len**2


def measured_peak_tflops(device: str) -> float | None:
    import torch

    if device != "cuda":
        return None
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    reps, start = 20, time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e12


def run_trial(encoder: str, data_dir: str, rows: int, batch: int, seq_len: int, device: str,
              out: str, compile_model: bool) -> dict:
    from weightsearch.trainer import load_config, train

    cfg = load_config({
        "encoder": encoder, "data_dir": data_dir,
        "tasks": [{"name": "synthetic", "type": "classification", "train_file": "syn/train.tsv",
                   "dev_files": {"dev": "syn/dev.tsv"}, "text_a": "sentence1",
                   "text_b": "sentence2", "label": "label", "labels": ["0", "1"]}],
        "weighting": {"scheme": "equal"}, "epochs": 1, "batch_size": batch,
        "max_seq_len": seq_len, "optimizer": "adamw", "device": device, "output_dir": out,
        "cache_dir": os.path.join(data_dir, "cache"), "compile": compile_model,
        "log_every": 200,
    })
    result = train(cfg, quiet=True)
    return {"sequences_per_s": result.train_examples_per_s, "train_time_s": result.train_time_s,
            "peak_gpu_mib": result.extra.get("peak_gpu_mib"),
            "peak_rss_mib": result.extra.get("peak_rss_mib")}


def packed(n: int, args: argparse.Namespace, data_dir: str) -> dict:
    """n MiniLM trials at once on one GPU, each its own process (as Ray runs fractional trials)."""
    procs = []
    start = time.perf_counter()
    for i in range(n):
        out = tempfile.mkdtemp(prefix=f"pack{n}-{i}-")
        cmd = [sys.executable, __file__, "--child", "--encoder-kind", "minilm", "--data-dir",
               data_dir, "--rows", str(args.pack_rows), "--device", args.device,
               "--batch", str(args.batch), "--seq-len", str(args.seq_len), "--out", out]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.perf_counter() - start
    return {"trials": n, "aggregate_sequences_per_s": sum(r["sequences_per_s"] for r in results),
            "per_trial": [round(r["sequences_per_s"], 1) for r in results],
            "wall_s": round(wall, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--rows", type=int, default=16000, help="training sequences per MFU run")
    p.add_argument("--pack-rows", type=int, default=8000, help="sequences per packed trial")
    p.add_argument("--packing", default="1,2,4")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--quick", action="store_true", help="tiny sizes, to check the script")
    p.add_argument("--datasheet-tflops", type=float, default=989.0)
    # internal: one packed trial
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--encoder-kind", default="minilm", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.rows, args.pack_rows, args.packing = 96, 64, "1,2"

    if args.child:
        encoder = save_encoder(args.encoder_kind, Path(tempfile.mkdtemp()))
        print(json.dumps(run_trial(encoder, args.data_dir, args.pack_rows, args.batch,
                                   args.seq_len, args.device, args.out, False)))
        return

    import torch

    data_dir = tempfile.mkdtemp(prefix="bench-gpu-")
    write_synthetic_task(Path(data_dir) / "syn", max(args.rows, args.pack_rows), args.seq_len)
    peak = measured_peak_tflops(args.device)
    report: dict = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                    "batch": args.batch, "seq_len": args.seq_len,
                    "measured_bf16_matmul_tflops": peak and round(peak, 1),
                    "datasheet_bf16_tflops": args.datasheet_tflops, "encoders": {}}
    for kind in ("bert-base", "minilm"):
        enc = save_encoder(kind, Path(tempfile.mkdtemp(prefix=f"{kind}-")))
        res = run_trial(enc, data_dir, args.rows, args.batch, args.seq_len, args.device,
                        tempfile.mkdtemp(prefix=f"run-{kind}-"), args.compile)
        achieved = res["sequences_per_s"] * flops_per_sequence(enc, args.seq_len) / 1e12
        res.update(model_tflops=round(achieved, 1),
                   mfu_vs_datasheet=round(achieved / args.datasheet_tflops, 3),
                   mfu_vs_measured=peak and round(achieved / peak, 3))
        report["encoders"][kind] = res
        print(kind, json.dumps(res), flush=True)
    report["packing"] = [packed(int(n), args, data_dir) for n in args.packing.split(",")]
    base = report["packing"][0]["aggregate_sequences_per_s"]
    for row in report["packing"]:
        row["gain_vs_one"] = round(row["aggregate_sequences_per_s"] / base, 2)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
