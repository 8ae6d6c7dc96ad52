"""Featurising long texts: time and peak memory of four ways, each in a fresh process on one
core, so peak RSS is its own:

- once: `encode_counted` as the trainer runs it, chunks of 512 rows each tokenized once at
  max_seq_len by the fast tokenizer's backend, the over-long rows read from its overflow, a
  long single text or the one long side of a pair cut past what truncation keeps;
- uncut: the same without the cut (restated here: every word of every text tokenized);
- two-pass: its way before (restated here), chunks truncated at max_seq_len + 1 to find the
  over-long rows, those tokenized again at max_seq_len;
- whole: the way before that (restated here), every row tokenized whole first.

    python benchmarks/bench_featurize.py --rows 48000 --words 128 --whole-rows 16000
    python benchmarks/bench_featurize.py --shape question --words 1000 --rows 12000 \
        --modes once,uncut

`--shape`: pairs (default: two texts of `--words` random words each), documents (one text
of `--words` words) or question (an 8-word question and a `--words`-word document); the words
come from 21 English words, or with `--vocab N` from N random letter strings. MiniLM's
tokenizer, max_seq_len 128: every row over-long and truncated, as a long-document task's.
"""

from __future__ import annotations

import argparse
import copy
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


def _vocabulary(size: int) -> list[str]:
    """WORDS, or with a size that many random lowercase words of 2-12 letters (text whose
    words rarely repeat, which WordPiece splits into several pieces)."""
    if not size:
        return WORDS
    rng = random.Random(1)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 12))) for _ in range(size)]


def _rows(shape: str, rows: int, words: int, vocab: int = 0
          ) -> tuple[list[str], list[str] | None]:
    rng = random.Random(0)
    pool = _vocabulary(vocab)
    make = lambda n: " ".join(rng.choice(pool) for _ in range(n))  # noqa: E731
    if shape == "documents":
        return [make(words) for _ in range(rows)], None
    if shape == "question":
        return [make(8) + "?" for _ in range(rows)], [make(words) for _ in range(rows)]
    return [make(words) for _ in range(rows)], [make(words) for _ in range(rows)]


def _uncut(tokenizer, text_a, text_b, max_len, chunk=512):
    backend = copy.deepcopy(tokenizer.backend_tokenizer)
    backend.enable_truncation(max_len)
    backend.no_padding()
    ids = []
    for start in range(0, len(text_a), chunk):
        part = text_a[start:start + chunk]
        rows = part if text_b is None else list(zip(part, text_b[start:start + chunk],
                                                               strict=True))
        ids += [e.ids for e in backend.encode_batch(rows)]
    return ids


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


def measure(mode: str, rows: int, words: int, max_len: int, shape: str, vocab: int = 0
            ) -> dict:
    """One measurement, in this process."""
    from weightsearch.trainer.encoders import load_tokenizer
    from weightsearch.trainer.heads.token_limit import encode_counted

    tokenizer = load_tokenizer(None)
    text_a, text_b = _rows(shape, rows, words, vocab)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if mode == "once":
        ids = encode_counted(tokenizer, text_a, text_b, max_len, "bench")[0]
    elif mode == "uncut":
        ids = _uncut(tokenizer, text_a, text_b, max_len)
    elif mode == "two-pass":
        ids = _two_pass(tokenizer, text_a, text_b, max_len)
    else:
        ids = _whole(tokenizer, text_a, text_b, max_len)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mode": mode, "shape": shape, "rows": rows, "words": words,
            "vocab": vocab or len(WORDS), "seconds": round(seconds, 2),
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
    parser.add_argument("--shape", choices=["pairs", "documents", "question"], default="pairs")
    parser.add_argument("--vocab", type=int, default=0,
                        help="random words to draw from (0: the 21 English words of WORDS)")
    parser.add_argument("--modes", default="once,uncut,two-pass,whole",
                        help="comma-separated, of: once, uncut, two-pass, whole")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: mode,rows
    args = parser.parse_args()
    if args.one:
        mode, rows = args.one.split(",")
        print(json.dumps(measure(mode, int(rows), args.words, args.max_len, args.shape,
                                 args.vocab)))
        return 0
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "RAYON_RS_NUM_CPUS": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    modes = args.modes.split(",")
    unknown = set(modes) - {"once", "uncut", "two-pass", "whole"}
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}; use once, uncut, two-pass, whole")
    runs = [(m, args.whole_rows if m == "whole" else args.rows) for m in modes]
    for mode, rows in runs:
        if rows == 0:
            continue
        out = subprocess.run([sys.executable, __file__, "--one", f"{mode},{rows}",
                              "--words", str(args.words), "--max-len", str(args.max_len),
                              "--shape", args.shape, "--vocab", str(args.vocab)],
                             env=env, capture_output=True, text=True, check=True)
        print(out.stdout.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
