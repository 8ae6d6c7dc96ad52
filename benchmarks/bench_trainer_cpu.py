"""Trainer throughput against a plain transformers loop, in one invocation, interleaved.

The baseline pads each batch to its longest sequence and never sorts by length, as the
reference MT-DNN code does; both sides train the same examples (the first N of each task) in
the same number of updates, with the same encoder, batch size and optimizer. Speed on a shared
machine drifts, so the runs alternate (trainer, plain, trainer, plain, ...) and the ratio of
medians is the figure to quote.

    python benchmarks/bench_trainer_cpu.py --data-dir ../shared/data/glue --tasks rte,mrpc

It also prints the trainer's achieved training FLOP/s per CPU-second against matmul peaks
measured in the same invocation on the same threads, and its share of the peak of the
arithmetic it ran in (bf16 where the CPU has bf16 hardware, fp32 elsewhere). FLOPs of a training
step, per sequence of padded length L (counted from every batch the encoder trains on):
6 x N x L (forward and backward through the N non-embedding parameters of the encoder and
heads) + 12 x layers x hidden x L^2 (attention scores and their weighted sum, forward and
backward). The peak: the best of several timed bf16 matmuls shaped like the encoder's
feed-forward layers ([batch x 64, hidden] x [hidden, 4 hidden]) per CPU-second, as bf16
tensors (the hardware's bf16 rate), as an fp32 `F.linear` under bf16 autocast (the way the
trainer multiplies in bf16, casts included) and as fp32 tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def plain_loop(data_dir: str, tasks: list[str], n_examples: int, batch_size: int,
               max_len: int, encoder_path: str, seed: int, lr: float) -> dict:
    """A straightforward MT-DNN epoch: random batches padded to their longest, nothing cached."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from weightsearch.trainer.data.readers import resolve_path
    from weightsearch.trainer.metrics import compute_metrics
    from weightsearch.trainer.optim import linear_warmup_decay
    from weightsearch.trainer.task_rows import read_task_file
    from weightsearch.trainer.tasks import TASK_PRESETS

    tok = AutoTokenizer.from_pretrained(encoder_path)
    torch.manual_seed(seed)
    model = AutoModel.from_pretrained(encoder_path)
    heads = torch.nn.ModuleDict()
    encoded = {}
    for name in tasks:
        spec = TASK_PRESETS[name]
        rows = read_task_file(spec, resolve_path(data_dir, spec.train_file))
        n = min(n_examples, len(rows.labels))
        pair = (rows.text_a[:n], rows.text_b[:n]) if rows.text_b is not None else (rows.text_a[:n],)
        enc = tok(*pair, truncation=True, max_length=max_len)
        labels = torch.tensor(np.asarray(rows.labels[:n]))
        encoded[name] = (enc, labels)
        out = 1 if spec.type != "classification" else spec.num_labels
        heads[name] = torch.nn.Sequential(torch.nn.Dropout(0.1),
                                          torch.nn.Linear(model.config.hidden_size, out))
    params = list(model.parameters()) + list(heads.parameters())
    opt = torch.optim.Adamax(params, lr=lr)
    rng = np.random.default_rng(seed)
    batches = []
    for name, (enc, _) in encoded.items():
        order = rng.permutation(len(enc["input_ids"]))
        batches += [(name, order[i:i + batch_size]) for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    # MT-DNN's schedule, as the trainer runs it: linear decay to 0 (no warm-up on either side).
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: linear_warmup_decay(step, len(batches), 0))
    model.train()
    examples, start = 0, time.perf_counter()
    for name, idx in batches:
        enc, labels = encoded[name]
        feats = tok.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
        pooled = model(**feats).pooler_output
        logits = heads[name](pooled)
        y = labels[idx]
        if logits.shape[-1] == 1:
            loss = torch.nn.functional.mse_loss(logits.squeeze(-1), y.float())
        else:
            loss = torch.nn.functional.cross_entropy(logits, y.long())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        examples += len(idx)
    elapsed = time.perf_counter() - start
    scores = {}
    model.eval()
    with torch.inference_mode():
        for name in tasks:
            spec = TASK_PRESETS[name]
            _, path = spec.dev_files[0]
            rows = read_task_file(spec, resolve_path(data_dir, path))
            preds = []
            for i in range(0, len(rows.labels), 64):
                texts = [rows.text_a[i:i + 64]]
                if rows.text_b is not None:
                    texts.append(rows.text_b[i:i + 64])
                feats = tok(*texts, truncation=True, max_length=max_len, padding=True,
                            return_tensors="pt")
                logits = heads[name](model(**feats).pooler_output)
                preds.append(logits.squeeze(-1) if logits.shape[-1] == 1 else logits.argmax(-1))
            values = compute_metrics(spec.metrics, torch.cat(preds).numpy(), rows.labels)
            scores[name] = round(values[spec.primary_metric], 4)
    return {"examples_per_s": examples / elapsed, "updates": len(batches), "examples": examples,
            "dev": scores}


class TrainingShapes:
    """Counts the (rows, padded length) of every batch an encoder trains on, by a forward
    pre-hook on the encoder `weightsearch.trainer.model.load_encoder` returns (the trainer's own
    code runs unchanged), with the CPU time spent inside `train`."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, int]] = []
        self.encoder = None

    def install(self):
        import weightsearch.trainer.loop as loop

        original = loop.load_encoder

        def counting(*args, **kwargs):
            encoder = original(*args, **kwargs)
            self.encoder = encoder

            def hook(module, _args, kw):
                ids = kw.get("input_ids")
                if module.training and ids is not None:
                    self.shapes.append(tuple(ids.shape))
            encoder.register_forward_pre_hook(hook, with_kwargs=True)
            return encoder

        loop.load_encoder = counting
        return lambda: setattr(loop, "load_encoder", original)

    def flops(self) -> float:
        cfg = self.encoder.config
        params = sum(p.numel() for n, p in self.encoder.named_parameters()
                     if not n.startswith("embeddings."))
        layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
        return sum(rows * (6 * params * length + 12 * layers * hidden * length ** 2)
                   for rows, length in self.shapes)


def matmul_peak(hidden: int, tokens: int, repeats: int = 20, mode: str = "bf16") -> float:
    """The best matmul rate, FLOP/s per CPU-second, of a feed-forward-shaped product, by
    `mode`: bf16 tensors (the hardware's bf16 rate: AMX tiles where the CPU has them), fp32
    tensors, or `autocast`: an fp32 `F.linear` under bf16 autocast, as the trainer calls it in
    bf16 (its casts included)."""
    import torch

    autocast = mode == "autocast"
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    a = torch.randn(tokens, hidden, dtype=dtype)
    w = torch.randn(4 * hidden, hidden, dtype=dtype)

    def product() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            torch.nn.functional.linear(a, w)

    for _ in range(3):
        product()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(5):
            product()
        best = min(best, (time.process_time() - start) / 5)
    return 2 * tokens * hidden * 4 * hidden / best


def trainer_run(data_dir: str, tasks: list[str], n_examples: int, batch_size: int, max_len: int,
                encoder: str, seed: int, cache_dir: str, bucketing: bool, lr: float,
                precision: str = "auto", attention_dropout: float | None = None) -> dict:
    from weightsearch.trainer import load_config, train

    shapes = TrainingShapes()
    restore = shapes.install()
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config({
            "encoder": encoder, "data_dir": data_dir, "tasks": tasks,
            "weighting": {"scheme": "equal"}, "epochs": 1, "batch_size": batch_size,
            "max_seq_len": max_len, "max_train_examples": n_examples,
            "seed": seed, "output_dir": os.path.join(out, "run"), "cache_dir": cache_dir,
            "lr": lr, "warmup": 0.0,  # the plain loop decays linearly too, without warm-up
            "length_bucketing": bucketing,
            "pooling": "pooler",  # the same head input as the plain loop
            "precision": precision, "attention_dropout": attention_dropout,
        })
        try:
            result = train(cfg, quiet=True)
        finally:
            restore()
        with open(os.path.join(out, "run", "steps.jsonl")) as log:
            steps = sum(1 for _ in log)
    dev = {t: round(result.final[t][cfg.task(t).primary_metric], 4) for t in tasks}
    import torch

    return {"examples_per_s": result.train_examples_per_s, "updates": steps,
            "examples": sum(result.train_sizes.values()), "dev": dev,
            # the training loop's own time (no evaluation), on every thread torch uses
            "flop_per_s_per_thread": shapes.flops() / result.train_time_s
            / torch.get_num_threads(),
            "peak_rss_mib": result.extra.get("peak_rss_mib")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data/glue")
    parser.add_argument("--tasks", default="rte,mrpc")
    parser.add_argument("--examples", type=int, default=100000,
                        help="training examples per task (default: all)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--no-bucketing", action="store_true",
                        help="trainer batches in random order, to isolate length bucketing")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                        help="the trainer's precision (the plain loop is always fp32)")
    parser.add_argument("--attention-dropout", type=float, default=None,
                        help="the trainer's attention_dropout (default: the encoder's own)")
    parser.add_argument("--versus", default="plain",
                        help="what alternates with the trainer: `plain` (the plain loop) or "
                             "`attention-dropout=X` (the trainer with that attention dropout)")
    args = parser.parse_args()

    import torch

    from weightsearch.trainer.device import select_runtime
    from weightsearch.trainer.encoders import resolve_encoder

    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = args.tasks.split(",")
    encoder_path = resolve_encoder(args.encoder)
    cache = tempfile.mkdtemp(prefix="bench-cache-")
    # Warm the tokenization cache: the trainer tokenizes once per study, not once per run.
    trainer_run(args.data_dir, tasks, 32, args.batch_size, args.max_seq_len, args.encoder, 0,
                cache, True, args.lr)
    from transformers import AutoConfig

    hidden = AutoConfig.from_pretrained(encoder_path).hidden_size
    tokens = args.batch_size * 64  # about the padded length of an RTE/MRPC batch
    modes = ("bf16", "autocast", "fp32")
    rates = {mode: [matmul_peak(hidden, tokens, mode=mode)] for mode in modes}
    runs: dict[str, list[dict]] = {"trainer": [], "plain": []}

    def versus(seed: int) -> dict:
        if args.versus == "plain":
            return plain_loop(args.data_dir, tasks, args.examples, args.batch_size,
                              args.max_seq_len, encoder_path, seed, args.lr)
        value = float(args.versus.split("=", 1)[1])
        return trainer_run(args.data_dir, tasks, args.examples, args.batch_size,
                           args.max_seq_len, args.encoder, seed, cache,
                           not args.no_bucketing, args.lr, args.precision, value)

    for rep in range(args.repeats):
        runs["trainer"].append(trainer_run(args.data_dir, tasks, args.examples, args.batch_size,
                                           args.max_seq_len, args.encoder, rep + 1, cache,
                                           not args.no_bucketing, args.lr, args.precision,
                                           args.attention_dropout))
        runs["plain"].append(versus(rep + 1))
        t, p = runs["trainer"][-1], runs["plain"][-1]
        print(f"repeat {rep + 1}: trainer {t['examples_per_s']:.1f} ex/s "
              f"{t['flop_per_s_per_thread'] / 1e9:.1f} GFLOP/s per thread, peak RSS "
              f"{t['peak_rss_mib']:.0f} MiB, dev {t['dev']}; {args.versus} "
              f"{p['examples_per_s']:.1f} ex/s dev {p['dev']}"
              + (f", {p['flop_per_s_per_thread'] / 1e9:.1f} GFLOP/s per thread, peak RSS "
                 f"{p['peak_rss_mib']:.0f} MiB" if "peak_rss_mib" in p else ""), flush=True)
    for mode in modes:
        rates[mode].append(matmul_peak(hidden, tokens, mode=mode))
    precision = select_runtime("cpu", args.precision).precision  # what the trainer ran in
    # The peak that bounds the trainer is the rate of the arithmetic it ran in: bf16 where the
    # CPU multiplies bf16 natively (`precision: auto`), fp32 elsewhere.
    own = max(rates["bf16" if precision == "bf16" else "fp32"])
    med = {k: statistics.median(r["examples_per_s"] for r in v) for k, v in runs.items()}
    achieved = statistics.median(r["flop_per_s_per_thread"] for r in runs["trainer"])
    summary = {
        "tasks": tasks, "examples_per_task": args.examples, "batch_size": args.batch_size,
        "max_seq_len": args.max_seq_len, "threads": torch.get_num_threads(),
        "updates": {k: v[0]["updates"] for k, v in runs.items()},
        "trainer_examples_per_s": round(med["trainer"], 1),
        "plain_examples_per_s": round(med["plain"], 1),
        "ratio": round(med["trainer"] / med["plain"], 2),
        "dev_trainer": [r["dev"] for r in runs["trainer"]],
        "dev_plain": [r["dev"] for r in runs["plain"]],
        "versus": args.versus,
        "trainer_gflop_per_s_per_thread": round(achieved / 1e9, 1),
        "trainer_precision": precision,
        "bf16_matmul_peak_gflop_per_s_per_thread": [round(p / 1e9, 1) for p in rates["bf16"]],
        "share_of_bf16_peak": round(achieved / max(rates["bf16"]), 3),
        "autocast_linear_gflop_per_s_per_thread": [
            round(p / 1e9, 1) for p in rates["autocast"]],
        "share_of_autocast_linear": round(achieved / max(rates["autocast"]), 3),
        "fp32_matmul_peak_gflop_per_s_per_thread": [round(p / 1e9, 1) for p in rates["fp32"]],
        "share_of_fp32_peak": round(achieved / max(rates["fp32"]), 3),
        "share_of_peak_in_its_precision": round(achieved / own, 3),
        "trainer_peak_rss_mib": [round(r["peak_rss_mib"]) for r in runs["trainer"]],
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
