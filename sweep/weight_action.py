"""What the searched central weight acts on: SIWLM's loss weight (`loss`, the paper's), or the
central task's sampling rate (`sampling`).

Under the reference's global gradient clipping a loss weight stops changing the training once
weight x gradient norm exceeds the clip: every larger weight trains the same clipped update
(RESULTS.md, "Does the weight act under clipping?"). A sampling rate is not cut by a clip: it
changes how many auxiliary batches train between the central task's. With `weight_acts_on:
sampling` each cell trains SIWLM at central weight 1 (its focus schedule and auxiliary weights as
the template sets them) and draws batches with He et al. 2019's weighted selection: the central
task at rate w, every auxiliary at rate 1, and an epoch ends with the central task's last batch
(one pass over the central task; at larger w fewer auxiliary batches fit into it). The searched
value keeps its name (`central_weight`) in the study; the run config of each cell shows the
sampling section it trained with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WEIGHT_ACTS_ON = ("loss", "sampling")
LOSS, SAMPLING = WEIGHT_ACTS_ON
AUX_RATE = 1.0  # each auxiliary task's sampling rate beside the central task's w


def as_sampling_rate(raw: dict[str, Any], central: str) -> dict[str, Any]:
    """The cell's run-config mapping with its central weight moved from the loss to the
    central task's sampling rate (module docstring); `raw` is the mapping `Space.apply` made."""
    weighting = dict(raw.get("weighting") or {})
    rate = weighting.get("central_weight", 1.0)
    weighting["central_weight"] = 1.0
    return {**raw, "weighting": weighting,
            "sampling": {"scheme": "weighted", "weights": {central: rate},
                         "others": AUX_RATE, "epoch_ends_with": central}}


def sampling_problems(train: Mapping[str, Any], weight_only: bool, fuse_cells: int | str
                      ) -> list[str]:
    """Why a study with `weight_acts_on: sampling` cannot run; empty when it can. `weight_only`:
    the study searches the central weight and nothing else."""
    found = []
    if not weight_only:
        found.append("weight_acts_on: sampling moves the searched central weight to the "
                     "sampling rate, so the study must search the central weight alone; use "
                     "weights: [1, 2, 4, 8, 15] (no other search.space path), or remove "
                     "weight_acts_on")
    if train.get("sampling") is not None:
        found.append("train.sampling: weight_acts_on: sampling sets each cell's sampling "
                     "(the central task at rate w, each auxiliary at 1); remove train.sampling")
    if train.get("batches") == "fixed":
        found.append("train.batches: fixed cannot be combined with weight_acts_on: sampling "
                     "(an epoch ends with the central task's last batch); remove batches: fixed")
    if fuse_cells != 1:  # a number above 1, or auto
        found.append("fuse_cells: cells fuse only when they differ in the loss weighting; with "
                     "weight_acts_on: sampling their batches differ, so set fuse_cells: false")
    return found
