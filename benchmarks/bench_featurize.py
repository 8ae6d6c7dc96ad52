"""Featurising long text pairs: time and peak memory of three ways, each in a fresh process on
one core, so peak RSS is its own:

- once: `encode_counted` as the trainer runs it, chunks of 512 rows each tokenized once at
  max_seq_len by the fast tokenizer's backend, the over-long rows read from its overflow;
- two-pass: its way before (restated here), chunks truncated at max_seq_len + 1 to find the
  over-long rows, those tokenized again at max_seq_len;
- whole: the way before that (restated here), every row tokenized whole first.

    python benchmarks/bench_featurize.py --rows 48000 --words 128 --whole-rows 16000

The rows are pairs of `--words` random words each (MiniLM's tokenizer, max_seq_len 128, every
pair over-long and truncated, as a long-document task would be).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time

WORDS = ["the", "model", "reads", "every", "sentence", "of", "document", "and", "answers",
         "whether", "claim", "holds", "against", "evidence", "gathered", "across",
         "paragraphs", "tokenization", "unbelievable", "mat", "cat"]


def _pairs(rows: int, words: int) -> tuple[list[str], list[str]]:
    rng = random.Random(0)
    make = lambda: " ".join(rng.choice(WORDS) for _ in range(words))  # noqa: E731
    return [make() for _ in range(rows)], [make() for _ in range(rows)]


def _whole(tokenizer, text_a, text_b, max_len):
    full = tokenizer(text_a, text_b, return_token_type_ids=True, return_attention_mask=False)
    ids = list(full["input_ids"])
    over = [i for i, row in enumerate(ids) if len(row) > max_len]
    cut = tokenizer([text_a[i] for i in over], [text_b[i] for i in over], truncation=True,
                    max_length=max_len, return_token_type_ids=True)
    for j, i in enumerate(over):
        ids[i] = cut["input_ids"][j]
    return ids


def _two_pass(tokenizer, text_a, text_b, max_len, chunk=512):
    ids = []
    for start in range(0, len(text_a), chunk):
        part_a, part_b = text_a[start:start + chunk], text_b[start:start + chunk]
        found = list(tokenizer(part_a, part_b, truncation=True, max_length=max_len + 1,
                               return_token_type_ids=True)["input_ids"])
        over = [i for i, row in enumerate(found) if len(row) > max_len]
        if over:
            cut = tokenizer([part_a[i] for i in over], [part_b[i] for i in over],
                            truncation=True, max_length=max_len, return_token_type_ids=True)
            for j, i in enumerate(over):
                found[i] = cut["input_ids"][j]
        ids += found
    return ids


def measure(mode: str, rows: int, words: int, max_len: int) -> dict:
    """One measurement, in this process."""
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.heads.base import encode_counted

    tokenizer = load_tokenizer(None)
    text_a, text_b = _pairs(rows, words)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if mode == "once":
        ids = encode_counted(tokenizer, text_a, text_b, max_len, "bench")[0]
    elif mode == "two-pass":
        ids = _two_pass(tokenizer, text_a, text_b, max_len)
    else:
        ids = _whole(tokenizer, text_a, text_b, max_len)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mode": mode, "rows": rows, "words": words, "seconds": round(seconds, 2),
            "rows_per_s": round(rows / seconds), "peak_rss_gb": round(peak / 2**20, 2),
            "growth_gb": round((peak - base) / 2**20, 2),
            "tokens": sum(len(r) for r in ids)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=48000)
    parser.add_argument("--whole-rows", type=int, default=16000,
                        help="rows for the former way (0: skip it; it holds every encoding)")
    parser.add_argument("--words", type=int, default=128)
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: mode,rows
    args = parser.parse_args()
    if args.one:
        mode, rows = args.one.split(",")
        print(json.dumps(measure(mode, int(rows), args.words, args.max_len)))
        return 0
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "RAYON_RS_NUM_CPUS": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    runs = [("once", args.rows), ("two-pass", args.rows)]
    runs += [("whole", args.whole_rows)] if args.whole_rows else []
    for mode, rows in runs:
        out = subprocess.run([sys.executable, __file__, "--one", f"{mode},{rows}",
                              "--words", str(args.words), "--max-len", str(args.max_len)],
                             env=env, capture_output=True, text=True, check=True)
        print(out.stdout.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
