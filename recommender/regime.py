"""The regime a weight search was measured in, so that kinds of measurement are kept apart.

A regime is five parts: the encoder (as the study records it), the encoder's size (hidden size x
layers, e.g. "768x12"), the stage its scores come from (multitask | finetuned), the SIWLM
weighting variant (reference | paper) and the gradient clipping
(`weightsearch.studies.schema.clipping_label`: clip1, the reference's global clipping at norm 1;
noclip; uclip1, the unweighted gradient clipped), which decides whether a weight acts at all. The
recommender answers for one regime and discounts evidence from others through a shared offset per
regime (`weightsearch.recommender.hierarchy.REGIME_SD`).

"unknown" means not recorded. An unknown encoder is a regime of its own (results of unknown
origin say nothing about a named encoder); an unknown size, variant or clipping is compatible
with any,
since it only says that nobody wrote it down. Sizes come from the study's attribute, else from
the encoder's config.json when the encoder is a local folder, else from KNOWN_ENCODERS.
Torch-free: the recommender's command must start fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

UNKNOWN = "unknown"
VARIANTS = ("reference", "paper")  # trainer.weighting's SIWLM variants (a test checks)
DEFAULT_ENCODER = "all-MiniLM-L6-v2"  # trainer.config's default encoder (a test checks)
# Hidden size x layers of encoders people run MT-DNN with, by their name's last part.
KNOWN_ENCODERS: dict[str, str] = {
    "bert-base-uncased": "768x12", "bert-base-cased": "768x12",
    "bert-large-uncased": "1024x24", "bert-large-cased": "1024x24",
    "roberta-base": "768x12", "roberta-large": "1024x24",
    "distilbert-base-uncased": "768x6", "distilroberta-base": "768x6",
    "albert-base-v2": "768x12", "electra-base-discriminator": "768x12",
    "deberta-v3-base": "768x12", "deberta-v3-large": "1024x24",
    "all-minilm-l6-v2": "384x6", "all-minilm-l12-v2": "384x12",
    "minilm-l12-h384-uncased": "384x12", "mt-dnn-base-uncased": "768x12",
}
# (hidden, layers) keys of config.json across architectures: BERT-likes, DistilBERT, T5, GPT-2.
_CONFIG_KEYS = (("hidden_size", "num_hidden_layers"), ("dim", "n_layers"),
                ("d_model", "num_layers"), ("n_embd", "n_layer"))


def short_name(encoder: str) -> str:
    """The part after the last slash, lowercased: how names and folders are compared."""
    return encoder.rstrip("/").rsplit("/", 1)[-1].lower()


def is_known(encoder: str) -> bool:
    return short_name(encoder) in KNOWN_ENCODERS


def size_from_config(folder: str | Path) -> str | None:
    """Hidden size x layers from a local model folder's config.json (None when unreadable)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for hidden, layers in _CONFIG_KEYS:
        h, n = config.get(hidden), config.get(layers)
        if isinstance(h, int) and isinstance(n, int) and h > 0 and n > 0:
            return f"{h}x{n}"
    return None


def encoder_size(encoder: str | None) -> str:
    """The encoder's size as hidden x layers, or "unknown"."""
    if not encoder or encoder == UNKNOWN:
        return UNKNOWN
    if "/" in encoder or "\\" in encoder or encoder.startswith("."):
        found = size_from_config(encoder)  # a local folder (a hub name's folder is absent here)
        if found:
            return found
    return KNOWN_ENCODERS.get(short_name(encoder), UNKNOWN)


@dataclass(frozen=True)
class Regime:
    encoder: str = UNKNOWN
    size: str = UNKNOWN
    stage: str = "multitask"
    variant: str = UNKNOWN
    clipping: str = UNKNOWN

    def encoder_matches(self, asked: str) -> bool:
        return asked.lower() == self.encoder or short_name(asked) == short_name(self.encoder)

    def differences(self, other: Regime) -> list[str]:
        """The parts in which two regimes disagree; an unknown size or variant disagrees with
        nothing."""
        out = []
        if not self.encoder_matches(other.encoder):
            out.append("encoder")
        if UNKNOWN not in (self.size, other.size) and self.size != other.size:
            out.append("encoder size")
        if self.stage != other.stage:
            out.append("stage")
        if UNKNOWN not in (self.variant, other.variant) and self.variant != other.variant:
            out.append("variant")
        if UNKNOWN not in (self.clipping, other.clipping) and self.clipping != other.clipping:
            out.append("clipping")
        return out

    def known_parts(self) -> int:
        return sum(v != UNKNOWN for v in (self.encoder, self.size, self.variant, self.clipping))

    def label(self) -> str:
        return (f"{self.encoder} ({self.size}), {self.stage}, variant {self.variant}, "
                f"clipping {self.clipping}")

    def as_dict(self) -> dict[str, str]:
        return {"encoder": self.encoder, "encoder_size": self.size, "stage": self.stage,
                "variant": self.variant, "clipping": self.clipping}
