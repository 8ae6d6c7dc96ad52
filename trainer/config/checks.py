"""What reading a run config checks beyond each setting's own rule: the central task, the
sections with parsers of their own, the folders and encoder the run reads or writes (made
absolute), and the rules across settings (span QA windows, `idle_params: step`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.config.defaults import DEFAULT_ENCODER
from weightsearch.trainer.config.distill_settings import parse_distill
from weightsearch.trainer.config.finetune_settings import parse_finetune
from weightsearch.trainer.config.optim_settings import parse_adamax
from weightsearch.trainer.config.paths import absolute
from weightsearch.trainer.mixture import parse_mixture
from weightsearch.trainer.smart import parse_adversarial
from weightsearch.trainer.tasks import TaskSpec, preset_key
from weightsearch.trainer.tracking import parse_tracking


def idle_params_problems(values: Mapping[str, Any]) -> list[str]:
    """idle_params: step restates the SIWLM code's Adamax (no bias correction, a schedule
    clock per parameter); other optimizers are refused rather than approximated."""
    if values.get("idle_params") != "step":
        return []
    adamax = values.get("adamax")
    if values.get("optimizer", "adamax") != "adamax" or getattr(adamax, "bias_correction",
                                                                  True):
        return ["idle_params: step follows the SIWLM code's Adamax (no bias correction, a "
                "schedule clock per parameter); use it with optimizer: adamax and adamax: "
                "{bias_correction: false} (preset: siwlm-paper), or idle_params: skip"]
    return []


# How a relative path is read, as the data_dir message says it; a caller with another rule (the
# HTTP service: a POSTed study has no folder) says its own instead.
RELATIVE_PATHS = ("(relative paths in a config file start at the file's folder, in --set at "
                  "the working directory)")


def parse_central_task(raw: Mapping[str, Any], names: list[str], problems: list[str]
                       ) -> str | None:
    """The task the others assist: `central_task` (a preset spelling such as "RTE" read as
    the task it names), else the first task."""
    central = raw.get("central_task", names[0] if names else None)
    if central is not None and not isinstance(central, str):
        problems.append(f"central_task: expected a task name, got {central!r}")
        return None
    if isinstance(central, str):
        if central not in names:  # accept preset spellings such as "RTE" or "STS-B"
            central = preset_key(central) if preset_key(central) in names else central
        if names and central not in names:
            problems.append(
                f"central_task: {raw.get('central_task')!r} is not among the tasks "
                f"({', '.join(names)}); add it to tasks or pick one of them"
            )
    return central


def parse_sections(raw: Mapping[str, Any], tasks: tuple[TaskSpec, ...], central: str | None,
                   problems: list[str]) -> dict[str, Any]:
    """The settings with a structure of their own, each checked by its feature's parser."""
    parsers: dict[str, Callable[[Any], Any]] = {
        "adamax": lambda v: parse_adamax(v, problems),
        "adversarial": lambda v: parse_adversarial(v, "adversarial", problems),
        "distill": lambda v: parse_distill(v, {t.name: t.type for t in tasks}, problems),
        "mixture": lambda v: parse_mixture(v, problems),
        "tracking": lambda v: parse_tracking(v, problems),
        "finetune": lambda v: parse_finetune(v, tasks, problems, central),
    }
    return {key: parse(raw[key]) for key, parse in parsers.items() if key in raw}


def parse_places(raw: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """Folders and weights the run reads or writes, made absolute; the encoder by name."""
    values: dict[str, Any] = {}
    init_from = raw.get("init_from")
    if init_from is not None:
        if not isinstance(init_from, str) or not Path(init_from).expanduser().exists():
            problems.append(
                f"init_from: {init_from!r} does not exist; give a run's output folder, one of its "
                "checkpoint folders or a model.safetensors file"
            )
        else:
            values["init_from"] = absolute(init_from)
    for key in ("output_dir", "cache_dir"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key].strip():
                problems.append(f"{key}: expected a folder path, got {raw[key]!r}")
            else:
                values[key] = absolute(raw[key])
    data_dir = raw.get("data_dir")
    if data_dir is not None:
        if not isinstance(data_dir, str):
            problems.append(f"data_dir: expected a folder path, got {data_dir!r}")
        elif not Path(data_dir).expanduser().is_dir():
            problems.append(
                f"data_dir: folder {data_dir!r} does not exist; point it at the folder of the "
                f"tasks' files {RELATIVE_PATHS}"
            )
        else:
            values["data_dir"] = absolute(data_dir)
    encoder = raw.get("encoder", DEFAULT_ENCODER)
    if not isinstance(encoder, str) or not encoder.strip():
        problems.append(f"encoder: expected a model id or folder path, got {encoder!r}")
    else:
        problem = _encoder_problem(encoder)
        if problem:
            problems.append(problem)
        values["encoder"] = encoder
    return values


def window_problems(tasks: Sequence[TaskSpec], run_max_seq_len: int) -> list[str]:
    """Span QA windows must hold the longest kept question and advance through the context."""
    found = []
    for i, spec in enumerate(tasks):
        if spec.doc_stride is None or spec.max_query_len is None:
            continue
        limit = spec.seq_len(run_max_seq_len)
        room = limit - spec.max_query_len - 3  # context tokens beside the longest question
        if room < 1:
            found.append(f"tasks[{i}].max_query_len: {spec.max_query_len} leaves no room for "
                         f"context in windows of {limit} tokens; lower it or raise the task's "
                         "max_seq_len")
        elif spec.doc_stride > room:
            found.append(f"tasks[{i}].doc_stride: {spec.doc_stride} is more than the {room} "
                         f"context tokens a window of {limit} holds, so windows would skip text;"
                         f" use at most {room} (BERT: 128 for windows of 384)")
    return found


def _encoder_problem(encoder: str) -> str | None:
    from weightsearch.trainer.encoders import DEFAULT_ENCODER_ALIASES, default_encoder_path

    if encoder in DEFAULT_ENCODER_ALIASES:
        try:
            default_encoder_path()
        except ConfigError as exc:
            return "encoder: " + "; ".join(exc.problems)
        return None
    # "org/name" is a hub id; anything rooted or deeper is a folder and must exist.
    looks_like_path = encoder.startswith((".", "/", "~")) or encoder.count("/") > 1
    if looks_like_path or Path(encoder).expanduser().exists():
        path = Path(encoder).expanduser()
        if not path.is_dir():
            return (
                f"encoder: folder {encoder!r} does not exist; give a folder saved with "
                f"save_pretrained, a model id, or leave it out for {DEFAULT_ENCODER}"
            )
        if not (path / "config.json").is_file():
            return f"encoder: {encoder!r} has no config.json; it is not a saved transformers model"
    return None
