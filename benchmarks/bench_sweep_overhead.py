"""How much a study costs beyond its trials' own training: Ray start, worker start, imports,
data loading, and the driver's bookkeeping.

Runs the same small study (sample data, 2 central tasks x 2 weights) at max_concurrent 1 and 2
and prints, for each, the study's wall time and the ratio

    wall time of the study / sum of the trials' own training time (the wall_time_s attribute)

1.0 would mean no overhead at all; with 2 concurrent trials an ideal study reaches 0.5. The
overhead column is `wall x concurrency / sum - 1`: the share of the trials' own time that the
study spends on top of it (Ray start, worker start and imports, scheduling, database writes).

    python benchmarks/bench_sweep_overhead.py                  # tiny random-init encoder
    python benchmarks/bench_sweep_overhead.py --encoder minilm # the real MiniLM encoder
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tiny_encoder(folder: Path) -> str:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from trainer.encoders import default_encoder_path

    tokenizer = AutoTokenizer.from_pretrained(default_encoder_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=256)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def run(encoder: str | None, concurrency: int, work: Path, epochs: int, examples: int) -> dict:
    import optuna

    from studies import schema as S
    from sweep.launch import launch
    from sweep.spec import load_study_spec

    train = {"data_dir": str(ROOT / "data" / "glue_sample"), "tasks": ["rte", "mrpc", "stsb"],
             "epochs": epochs, "batch_size": 16, "max_train_examples": examples}
    if encoder:
        train["encoder"] = encoder
    url = f"sqlite:///{work / f'bench-{concurrency}.db'}"
    spec = load_study_spec({
        "study": f"bench-c{concurrency}", "storage": url, "train": train,
        "central_tasks": ["rte", "mrpc"], "weights": [1, 9], "max_concurrent": concurrency,
        "resources": {"cpu": 1, "gpu": 0},
        "workdir": str(work / f"runs-{concurrency}"),
    })
    started = time.perf_counter()
    summary = launch(spec, progress=False)  # starts and stops its own Ray
    wall = time.perf_counter() - started
    own = sum(
        t.user_attrs[S.T_WALL_TIME]
        for name in optuna.get_all_study_names(url)
        for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
        if S.T_WALL_TIME in t.user_attrs
    )
    return {"concurrency": concurrency, "trials": summary.ran, "wall_s": wall,
            "trials_s": own, "ratio": wall / own if own else float("nan"),
            "overhead": wall * concurrency / own - 1 if own else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", choices=("tiny", "minilm"), default="tiny")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-train-examples", type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("WEIGHTSEARCH_CACHE", str(work / "cache"))
        encoder = tiny_encoder(work / "tiny") if args.encoder == "tiny" else None
        rows = [run(encoder, c, work, args.epochs, args.max_train_examples) for c in (1, 2)]
    print(f"encoder={args.encoder} epochs={args.epochs} "
          f"max_train_examples={args.max_train_examples} cpus={os.cpu_count()}")
    print("max_concurrent  trials  study_wall_s  sum_trial_s  wall/sum  overhead")
    for r in rows:
        print(f"{r['concurrency']:>14}  {r['trials']:>6}  {r['wall_s']:>12.1f}  "
              f"{r['trials_s']:>11.1f}  {r['ratio']:>8.2f}  {r['overhead']:>8.1%}")


if __name__ == "__main__":
    main()
