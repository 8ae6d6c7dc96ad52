"""Run-config presets: `preset: NAME` fills in settings the config does not give itself.

A preset is plain config data. Keys the config sets win; a mapping the config sets (for example
`weighting` or `finetune`) is merged key by key into the preset's, so
`{preset: siwlm-paper, weighting: {central_weight: 9}}` keeps the preset's scheme and variant.
A mapping that names another scheme than the preset's (`weighting: {scheme: dwa}`) replaces the
preset's: one scheme's settings mean nothing to another.
A preset may also shape the task list: settings for the GLUE tasks it names (a task's own keys
win, and one that sets its own `type` keeps every setting of its own), the tasks to train when
the config lists none, and the order of the auxiliary tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The SIWLM paper's pipeline as its published code runs it (Son et al. 2021, section 4, on the
# MT-DNN code base): MT-DNN's multi-task settings (Adamax, lr 5e-5, batch 32, 5 epochs, 10%
# warm-up, clipping 1.0, decoupled weight decay 0.01 with biases and LayerNorm exempt), the
# code's warmup_linear schedule (pytorch-pretrained-bert 0.6.0's), BERT's sequence length 512
# with over-long training examples dropped and dev examples scored whole, BERT's pooled [CLS]
# under the heads, fp32, MT-DNN's batches (each task's cut once from consecutive rows, no
# length bucketing), then the central task fine-tuned from the multi-task encoder with a new
# linear head (the script's answer_opt 0) and SMART regularisation, as the fine-tuning script
# runs it: RAdam at 5e-5 with eps 1e-6 (the code's --adam_eps), batch 32, 5 epochs.
SIWLM_PAPER: dict[str, Any] = {
    "weighting": {"scheme": "siwlm", "variant": "reference", "focus_span": 20, "off_focus": 0.1},
    "optimizer": "adamax",
    "lr": 5e-5,
    "batch_size": 32,
    "epochs": 5,
    "warmup": 0.1,
    "schedule": "warmup_linear",
    "grad_clip": 1.0,
    "weight_decay": 0.01,
    # SIWLM's copy of the MT-DNN code: BERT-style Adamax (no bias correction, eps 1e-6) and
    # task heads drawn from N(0, 0.02) with zero biases.
    "adamax": {"bias_correction": False, "eps": 1e-6},
    # torch 1.4's zero_grad, under which the code's Adamax steps every head that has had a
    # gradient on every later batch, on a clock of its own
    "idle_params": "step",
    "adam_eps": 1e-6,  # the fine-tuning stage's RAdam
    "head_init": "normal",
    "max_seq_len": 512,
    "overlong": "drop",
    "eval_max_seq_len": 512,
    "pooling": "pooler",
    "precision": "fp32",
    "length_bucketing": False,
    # MultiTaskBatchSampler: each task's batches cut once from consecutive rows, kept in one
    # shuffled order every epoch; only the interleaving of tasks is dealt anew.
    "batches": "fixed",
    "finetune": {
        "tasks": "central",
        "epochs": 5,
        # SIWLM's fine-tuning script (scripts/run_mrpc.sh): RAdam at 5e-5 (eps: adam_eps above),
        # global gradient clipping at 1.0, SMART, a linear head.
        "optimizer": "radam",
        "lr": 5e-5,
        "batch_size": 32,
        "heads": "fresh",
        "head": "linear",
        "adversarial": {"enabled": True},
    },
}

RUN_PRESETS: dict[str, dict[str, Any]] = {"siwlm-paper": SIWLM_PAPER}

# Per-task settings, from the reference code's task definitions (experiments/glue/
# glue_task_def.yml): the pairwise classification tasks, QNLI among them, use the SAN answer
# module (enable_san with answer_opt 1 in the multi-task script).
_SAN = {"head": "san"}
PRESET_TASKS: dict[str, dict[str, dict[str, Any]]] = {
    "siwlm-paper": {
        name: _SAN for name in ("mnli", "mrpc", "qnli", "qqp", "rte", "wnli", "snli", "scitail")
    },
}
# The published multi-task script's task list (scripts/run_mtdnn_mrpc.sh:
# mrpc,rte,cola,mnli,qnli,qqp,sst,stsb). The central task moves to the front, as in SIWLM; the
# others keep this order, which decides the order of SIWLM's focus rotation. Tasks outside it
# follow in config order. Also the tasks a preset run trains when the config lists none.
PRESET_ORDER: dict[str, tuple[str, ...]] = {
    "siwlm-paper": ("mrpc", "rte", "cola", "mnli", "qnli", "qqp", "sst2", "stsb"),
}


def expand_preset(raw: Mapping[str, Any], problems: list[str]) -> Mapping[str, Any]:
    """`raw` with its `preset` filled in (and the `preset` key removed)."""
    if "preset" not in raw:
        return raw
    name = raw["preset"]
    rest = {k: v for k, v in raw.items() if k != "preset"}
    if name is None:
        return rest
    if not isinstance(name, str) or name.lower() not in RUN_PRESETS:
        problems.append(f"preset: {name!r} is not a preset; choose one of {', '.join(RUN_PRESETS)}")
        return rest
    name = name.lower()
    out = _merge(RUN_PRESETS[name], rest)
    order = PRESET_ORDER.get(name)
    if "tasks" not in out and order:
        out["tasks"] = list(order)
    if isinstance(out.get("tasks"), list):
        first = out["tasks"][0] if out["tasks"] else None
        first = first.get("name", first.get("preset")) if isinstance(first, Mapping) else first
        if "central_task" not in out and isinstance(first, str):
            out["central_task"] = first  # the listed first task, before the preset's order
        out["tasks"] = _preset_tasks(out["tasks"], PRESET_TASKS.get(name, {}), order or ())
    return out


def _preset_tasks(items: list[Any], settings: Mapping[str, Mapping[str, Any]],
                  order: tuple[str, ...]) -> list[Any]:
    """The task list with the preset's per-task settings under each item's own, sorted by the
    preset's order (stable; tasks it does not name after the ones it does)."""
    from weightsearch.trainer.tasks import preset_key

    def key_of(item: Any) -> str | None:
        name = item if isinstance(item, str) else (
            item.get("preset") if isinstance(item, Mapping) else None)
        return preset_key(name) if isinstance(name, str) else None

    out = []
    for item in items:
        extra = settings.get(key_of(item) or "")
        if extra is None or (isinstance(item, Mapping) and "type" in item):
            out.append(item)
        elif isinstance(item, str):
            out.append({"preset": item, **extra})
        else:
            out.append({**extra, **item})
    rank = {name: i for i, name in enumerate(order)}
    return sorted(out, key=lambda item: rank.get(key_of(item) or "", len(rank)))


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), Mapping) \
                and value.get("scheme", base[key].get("scheme")) == base[key].get("scheme"):
            out[key] = _merge(base[key], value)
        else:
            out[key] = value
    return out
