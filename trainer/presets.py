"""Run-config presets: `preset: NAME` fills in settings the config does not give itself.

A preset is plain config data. Keys the config sets win; a mapping the config sets (for example
`weighting` or `finetune`) is merged key by key into the preset's, so
`{preset: siwlm-paper, weighting: {central_weight: 9}}` keeps the preset's scheme and variant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The SIWLM paper's pipeline as its published code runs it (Son et al. 2021, section 4, on the
# MT-DNN code base): MT-DNN's multi-task settings (Adamax, lr 5e-5, batch 32, 5 epochs, 10%
# warm-up, clipping 1.0, decoupled weight decay 0.01 with biases and LayerNorm exempt), BERT's
# sequence length 512 with over-long training examples dropped and dev examples scored whole,
# BERT's pooled [CLS] under the heads, fp32, batches in MT-DNN's shuffled order (no length
# bucketing), then the central task fine-tuned from the multi-task encoder with new heads and
# SMART regularisation (Adam, lr in SMART's range {1,2,3,5}e-5, batch 32, up to 5 epochs).
SIWLM_PAPER: dict[str, Any] = {
    "weighting": {"scheme": "siwlm", "variant": "reference", "focus_span": 20, "off_focus": 0.1},
    "optimizer": "adamax",
    "lr": 5e-5,
    "batch_size": 32,
    "epochs": 5,
    "warmup": 0.1,
    "grad_clip": 1.0,
    "weight_decay": 0.01,
    "max_seq_len": 512,
    "overlong": "drop",
    "eval_max_seq_len": 512,
    "pooling": "pooler",
    "precision": "fp32",
    "length_bucketing": False,
    "finetune": {
        "tasks": "central",
        "epochs": 5,
        "optimizer": "adamw",
        "lr": 2e-5,
        "batch_size": 32,
        "heads": "fresh",
        "adversarial": {"enabled": True},
    },
}

PRESETS: dict[str, dict[str, Any]] = {"siwlm-paper": SIWLM_PAPER}


def expand_preset(raw: Mapping[str, Any], problems: list[str]) -> Mapping[str, Any]:
    """`raw` with its `preset` filled in (and the `preset` key removed)."""
    if "preset" not in raw:
        return raw
    name = raw["preset"]
    rest = {k: v for k, v in raw.items() if k != "preset"}
    if name is None:
        return rest
    if not isinstance(name, str) or name.lower() not in PRESETS:
        problems.append(f"preset: {name!r} is not a preset; choose one of {', '.join(PRESETS)}")
        return rest
    return _merge(PRESETS[name.lower()], rest)


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), Mapping):
            out[key] = _merge(base[key], value)
        else:
            out[key] = value
    return out
