"""What a recommendation is asked for: the request's checks, and the regime the answer is for.

`check_request`, `check_regime` and `normalize_clipping` check the training size, task type,
encoder, stage, variant and clipping asked for, and refuse what they cannot use (ConfigError);
ENCODER_PATTERN and CLIPPING_PATTERN are also the HTTP schema's. The answer is built for one regime
(`choose_regime`): the one asked for; else that of the studies you trained (launched, not
imported; among several, the one with the most evidence, i.e. the largest summed precision of the
points compatible with it), else the default encoder's. Imported results (the paper's table among
them) are evidence, never the default regime; points from each other regime count through a
shared offset from it (`weightsearch.recommender.hierarchy.REGIME_SD`). An encoder with no
evidence is answered from the others, and the answer says so (`unmatched_encoder`), listing the
encoders the evidence has; a name nobody used and this tool does not know, spelt almost like one
that is, is refused as a likely typo (`refuse_a_misspelling`). Evidence of the other quantity (a
sampling rate where a loss weight is asked, or the reverse) is left out (`of_its_quantity`). The
notes' hints name what their reader sets: CLI flags or HTTP query parameters (`how_to_ask`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re

from weightsearch.core.errors import ConfigError
from weightsearch.recommender.evidence import (
    UNKNOWN_ENCODER,
    EvidencePoint,
    is_rate,
    same_quantity,
)
from weightsearch.recommender.regime import (
    DEFAULT_ENCODER,
    KNOWN_ENCODERS,
    UNKNOWN,
    VARIANTS,
    Regime,
    encoder_size,
    is_known,
    short_name,
)
from weightsearch.studies import schema
from weightsearch.trainer.clipping import DEFAULT_GRAD_CLIP, DEFAULT_GRAD_CLIP_MODE
from weightsearch.trainer.task_types import (
    TASK_TYPES,  # a live view: registered types count at once
)

MAX_TRAIN_SIZE = 10 ** 12  # far beyond any dataset; larger numbers are typos
DEFAULT_CLIPPING = schema.clipping_label(DEFAULT_GRAD_CLIP, DEFAULT_GRAD_CLIP_MODE)  # clip1
ENCODER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)?$"  # also the HTTP schema's
_ENCODER_NAME = re.compile(ENCODER_PATTERN)
AUDIENCES = ("cli", "http")  # who reads the notes: their hints name CLI flags or HTTP parameters


def check_train_size(train_size) -> int:
    """A whole number of examples in 1..MAX_TRAIN_SIZE (no float conversion: a 400-digit number
    must be refused, not overflow)."""
    if isinstance(train_size, bool):
        train_size = None
    if isinstance(train_size, float) and train_size.is_integer():
        train_size = int(train_size)
    digits = None  # how many digits a huge number has, to say so without converting it
    if isinstance(train_size, str) and re.fullmatch(r"\s*\d+\s*", train_size):
        text = train_size.strip().lstrip("0") or "0"
        if len(text) <= 20:
            train_size = int(text)
        else:  # int() of thousands of digits is slow, and refused beyond 4,300
            digits, train_size = len(text), MAX_TRAIN_SIZE + 1
    if not isinstance(train_size, int):
        raise ConfigError(f"train_size must be a positive whole number of examples, "
                          f"got {train_size!r}")
    if train_size <= 0:
        raise ConfigError(f"train_size must be a positive number of examples, got {train_size}")
    if train_size > MAX_TRAIN_SIZE:
        if digits is None:  # str() of an int is refused beyond 4,300 digits: estimate those
            digits = len(str(train_size)) if train_size.bit_length() < 14_000 else \
                int(train_size.bit_length() * math.log10(2)) + 1
        shown = str(train_size) if digits <= 20 else f"a {digits}-digit number"
        raise ConfigError(f"train_size must be at most {MAX_TRAIN_SIZE:,} examples (10^12), got "
                          f"{shown}; give the number of training examples of the central task")
    return train_size


def check_request(train_size, task_type: str | None) -> tuple[int, str | None]:
    problems = []
    size = None
    try:
        size = check_train_size(train_size)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if task_type is not None and task_type not in TASK_TYPES:
        problems.append(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
    if problems:
        raise ConfigError(problems)
    return size, task_type  # type: ignore[return-value]


# A norm > 0 as a decimal literal: some digit 1-9 before any exponent, an exponent of at most two
# digits (so the norm stays finite), which is what normalize_clipping accepts.
_NORM = r"([0-9]*[1-9][0-9]*(\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)([eE][+-]?[0-9]{1,2})?"
CLIPPING_PATTERN = rf"^(rate-)?(noclip|u?clip{_NORM})$"
_CLIPPING = re.compile(CLIPPING_PATTERN)
_ZERO_NORM = re.compile(r"^(rate-)?u?clip(0+(\.0*)?|\.0+)([eE][+-]?[0-9]+)?$")  # 0: noclip


def normalize_clipping(clipping: str | None) -> str | None:
    """A clipping regime as `weightsearch.studies.schema.clipping_label` spells it (clip1.0 ->
    clip1), so that it meets the evidence's; raises ConfigError for what names no regime."""
    if clipping is None:
        return None
    fix = ("clipping must be clip<norm> (the weighted gradient clipped, as the reference does; "
           "clip1 by default), uclip<norm> (the unweighted gradient clipped) or noclip, each "
           "led by rate- where the weight was the central task's sampling rate, got "
           f"{clipping!r}")
    if not isinstance(clipping, str) or len(clipping) > 40:
        raise ConfigError([fix])
    if _ZERO_NORM.match(clipping):
        raise ConfigError([fix + "; a norm of 0 is noclip"])
    if not _CLIPPING.match(clipping):
        raise ConfigError([fix])
    acts_on = "sampling" if clipping.startswith("rate-") else "loss"
    clipping = clipping.removeprefix("rate-")
    if clipping == "noclip":
        return schema.clipping_label(0.0, None, acts_on)
    unweighted = clipping.startswith("u")
    norm = float(clipping[5 if unweighted else 4:])  # the pattern spells a finite norm > 0
    return schema.clipping_label(norm, "unweighted" if unweighted else "global", acts_on)


def check_regime(encoder: str | None, stage: str | None,
                 variant: str | None = None, clipping: str | None = None
                 ) -> tuple[str | None, str | None]:
    problems = []
    try:
        normalize_clipping(clipping)
    except ConfigError as err:
        problems.extend(err.problems)
    if isinstance(encoder, str) and _is_folder_path(encoder):
        # A local model folder, as a study of it records it: asked for as studies are
        # matched, by the folder's own name (`Regime.encoder_matches`).
        encoder = asked_encoder(os.path.expanduser(encoder))
        if encoder is None:
            problems.append("encoder: the folder's name must be a model name (letters, digits, "
                            "_ . -); ask by that name")
    elif encoder is not None and (not isinstance(encoder, str) or len(encoder) > 200
                                  or not _ENCODER_NAME.match(encoder)):
        problems.append(f"encoder must be a model name such as bert-base-uncased or "
                        f"sentence-transformers/all-MiniLM-L6-v2 (as studies record it), or a "
                        f"local model folder (/path/to/encoder, ./encoder), got {encoder!r}")
    if stage is not None and stage not in schema.STAGES:
        problems.append(f"stage must be one of {', '.join(schema.STAGES)}, got {stage!r}")
    if variant is not None and variant not in VARIANTS:
        problems.append(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if problems:
        raise ConfigError(problems)
    return (encoder.lower() if encoder else None), stage


def _is_folder_path(encoder: object) -> bool:
    """A local folder as a user types it: absolute, relative to here, or under ~; printable."""
    return (isinstance(encoder, str) and 0 < len(encoder) <= 4096 and encoder.isprintable()
            and encoder.startswith(("/", "./", "../", "~/")))


def asked_encoder(recorded: str | None) -> str | None:
    """A study's recorded encoder (a name, or a local folder) as the recommender is asked for
    it: the name itself when well-formed, else the folder's last part; None when neither is."""
    if not recorded:
        return None
    for name in (recorded, short_name(recorded)):
        if len(name) <= 200 and _ENCODER_NAME.match(name):
            return name
    return None


USABLE_INFORMATIVENESS = 0.1  # below it a point's curve locates no best weight (task_curve)


def _passed_over(launched: list[EvidencePoint], usable: list[EvidencePoint]) -> str:
    """A note naming the regimes of launched studies that could not set the regime, since
    none of their points locates a best weight."""
    kept = {p.regime for p in usable}
    skipped = sorted({p.regime.label() for p in launched if p.regime not in kept})
    if not skipped:
        return ""
    return ("; passed over as the regime, since no study of it locates a best weight (flat "
            "within seed noise, or one weight): " + "; ".join(skipped))


def _encoder_matches(asked: str, recorded: str) -> bool:
    return asked == recorded or short_name(asked) == short_name(recorded)


def choose_regime(evidence: list[EvidencePoint], encoder: str | None, stage: str | None,
                  variant: str | None = None, size: str | None = None,
                  clipping: str | None = None,
                  audience: str = "cli") -> tuple[Regime, list[str]]:
    """The regime to answer for, and notes on how it was chosen. Unset parts: among the regimes
    of the points that match the set parts, the one whose compatible points have the largest
    summed precision (ties: the one with more parts recorded). With no encoder asked, the
    candidates are first the regimes of the studies the user trained (launched, not imported),
    else the default encoder's: a user asks about the setting they train in, not the one with
    the most published rows, so an imported table (the paper's) never sets the regime unless
    asked for by --encoder/--stage; it counts as another regime's evidence. `audience`: the
    notes' hints name CLI flags ("cli") or HTTP query parameters ("http")."""
    def fits(p: EvidencePoint) -> bool:
        return (encoder is None or _encoder_matches(encoder, p.encoder)) and \
            (stage is None or p.stage == stage) and \
            (variant is None or p.regime.variant in (variant, UNKNOWN)) and \
            (size in (None, UNKNOWN) or p.regime.size in (size, UNKNOWN)) and \
            (clipping is None or p.clipping in (clipping, UNKNOWN))

    fitting = [p for p in evidence if fits(p)]
    why = "the strongest evidence available"
    if encoder is None:
        launched = [p for p in fitting if p.source == "studies" and not p.imported]
        # A study whose curve locates nothing (flat within noise, one weight) has no say in
        # the answer, so it must not set the regime either.
        own = [p for p in launched if p.informativeness >= USABLE_INFORMATIVENESS]
        default = [p for p in fitting if _encoder_matches(DEFAULT_ENCODER, p.encoder)]
        imported = "" if not any(p.imported for p in evidence) else \
            "; imported results count as another regime's evidence, never as the regime"
        imported += _passed_over(launched, own)
        if own:
            fitting = own
            count = len({p.family for p in own})
            why = (f"the regime of your own studies ({count} central "
                   f"task{'s' if count != 1 else ''}), those you launched{imported}; "
                   f"{how_to_ask(audience, 'encoder', 'stage')} to answer for another")
        elif default:
            fitting = default
            why = (f"the default encoder's, {DEFAULT_ENCODER}: no studies of your own "
                   f"(launched, not imported) in the storage{imported}; "
                   f"{how_to_ask(audience, 'encoder', 'stage')} to answer for another")
    candidates = {p.regime for p in fitting}
    if clipping is None:  # unasked: the trainer's default (or unrecorded), where measured
        candidates = {r for r in candidates
                      if r.clipping in (DEFAULT_CLIPPING, UNKNOWN)} or candidates
    # A regime with an unknown size or variant stands only where no recorded one refines it.
    candidates = {r for r in candidates if not any(
        o != r and not r.differences(o) and o.known_parts() > r.known_parts()
        for o in candidates)} or candidates
    if candidates:
        def support(r: Regime) -> tuple:
            total = sum(1.0 / p.variance for p in evidence if not r.differences(p.regime))
            return total, r.known_parts(), r.label()

        regime = max(candidates, key=support)
        if variant is not None and regime.variant == UNKNOWN:
            regime = dataclasses.replace(regime, variant=variant)
        if size not in (None, UNKNOWN) and regime.size == UNKNOWN:
            regime = dataclasses.replace(regime, size=size)
        if clipping is not None and regime.clipping == UNKNOWN:
            regime = dataclasses.replace(regime, clipping=clipping)
        how = "as asked" if encoder and stage else why
        return regime, [f"regime: encoder {regime.encoder} ({regime.size}), stage "
                        f"{regime.stage}, variant {regime.variant}, clipping "
                        f"{regime.clipping} ({how})"]
    regime = Regime(encoder or UNKNOWN_ENCODER, size or encoder_size(encoder),
                    stage or "multitask", variant or UNKNOWN, clipping or DEFAULT_CLIPPING)
    return regime, [f"no evidence for encoder {regime.encoder}, stage {regime.stage}"
                    + (f", variant {variant}" if variant else "")
                    + (f", clipping {clipping}" if clipping else "")
                    + ": answered from the other regimes, each discounted"]


def unmatched_encoder(evidence: list[EvidencePoint], encoder: str | None) -> dict | None:
    """What to say when no point was measured with the encoder asked for."""
    if encoder is None or any(_encoder_matches(encoder, p.encoder) for p in evidence):
        return None
    return {"asked": encoder, "known_encoder": is_known(encoder),
            "encoders_with_evidence": sorted({p.encoder for p in evidence})}


def refuse_a_misspelling(encoder: str, with_evidence: list[str],
                         audience: str = "cli") -> None:
    """An encoder no study used and this tool does not know, spelt almost like one that is
    (robertta-base): most likely a typo, which would silently answer from other regimes. A name
    unlike any (a lab's own encoder) is answered from the others, with a note."""
    names = sorted(set(KNOWN_ENCODERS) | {short_name(e) for e in with_evidence})
    close = difflib.get_close_matches(short_name(encoder), names, n=3, cutoff=0.85)
    if close:
        shows = ("GET /studies/{name} shows a study's encoder" if audience == "http"
                 else "inspect shows each study's encoder")
        raise ConfigError(f"encoder {encoder!r} is not one any study used nor one this tool "
                          f"knows; did you mean {' or '.join(close)}? Give the name as studies "
                          f"record it ({shows})")


def of_its_quantity(evidence: list[EvidencePoint], clipping: str, notes: list[str],
                    audience: str) -> list[EvidencePoint]:
    """`same_quantity`, with a note on what was left out; refused where nothing is left."""
    kept, other_kind = same_quantity(evidence, clipping)
    if other_kind:
        what = "a loss weight" if is_rate(clipping) else "a sampling rate"
        other = "clip1" if is_rate(clipping) else "rate-clip1"
        ask = f"clipping={other}" if audience == "http" else f"--clipping {other}"
        notes.append(f"left out: {other_kind} task(s) whose searched weight was {what} "
                     f"(another quantity, not a scale of this one; ask {ask} to answer for it)")
    if not kept:
        raise ConfigError(f"no evidence for clipping {clipping}: no study measured that "
                          "quantity")
    return kept


def how_to_ask(audience: str, *names: str) -> str:
    """How a reader sets these request parameters: CLI flags, or HTTP query parameters."""
    if audience not in AUDIENCES:
        raise ValueError(f"audience must be one of {', '.join(AUDIENCES)}, got {audience!r}")
    if audience == "http":
        plural = "s" if len(names) > 1 else ""
        return "set the " + "/".join(f"`{n}`" for n in names) + f" query parameter{plural}"
    return "pass " + "/".join(f"--{n.replace('_', '-')}" for n in names)
