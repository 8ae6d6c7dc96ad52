"""Stacked models as one "wide" model of ordinary batched kernels (as HFTA fuses them), for
fused runs (`weightsearch.trainer.fused`).

K members of one architecture keep each parameter in one [K, ...] tensor. `widen` copies the
lead model with those tensors in place of its parameters and swaps each parameterised layer for
its stacked form: `nn.Linear` for a batched matrix product, `nn.LayerNorm` for a normalisation
with [K, H] weights, `nn.Embedding` for a lookup in [K, V, H], `nn.GRUCell` for two batched
products. The wide model runs on the shared batch replicated K times along the batch dimension,
member-major ([K*B, ...]): parameter-free layers (activations, reshapes, attention) just see K*B
rows, so attention runs once for all members, and autocast covers the matrix products as it
does a stand-alone run's. Dropout draws one mask for the first B rows, the mask a stand-alone
run draws, and repeats it over the members (`weightsearch.trainer.draws`); attention dropout
too, through an attention function of transformers' attention interface that computes what
SDPA's math kernel computes with the shared mask (without dropout: SDPA itself, any kernel).

A layer with parameters of another kind, a random layer other than `nn.Dropout` and a
batch-norm layer raise `CannotFuse` naming the layer.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from weightsearch.trainer import draws
from weightsearch.trainer.fusable import CannotFuse

# The attention implementation of a wide model's encoder (transformers' attention interface).
ATTENTION = "weightsearch_stacked"


def by_member(x: Tensor, members: int) -> Tensor:
    """`x` [K*B, ..., F] as [K, B*..., F]; refuses rows that cannot be member-major."""
    if x.dim() < 2 or x.shape[0] % members:
        raise ValueError(f"a stacked layer of {members} members got input of shape "
                         f"{tuple(x.shape)}, whose rows are not the members' [K*B, ...]")
    return x.reshape(members, -1, x.shape[-1])


class StackedLinear(nn.Module):
    """K linear layers: weight [K, out, in], bias [K, out]."""

    weight: Tensor
    bias: Tensor | None

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x: Tensor) -> Tensor:
        rows = by_member(x, self.weight.shape[0])
        weight = self.weight.transpose(1, 2)
        out = (torch.bmm(rows, weight) if self.bias is None
               else torch.baddbmm(self.bias.unsqueeze(1), rows, weight))
        return out.reshape(*x.shape[:-1], out.shape[-1])


class StackedLayerNorm(nn.Module):
    """K layer norms over the last dimension: weight and bias [K, H]."""

    weight: Tensor
    bias: Tensor | None

    def __init__(self, layer: nn.LayerNorm) -> None:
        super().__init__()
        if len(layer.normalized_shape) != 1:
            raise ValueError("only a norm over the last dimension stacks")
        self.shape, self.eps = tuple(layer.normalized_shape), layer.eps
        self.weight, self.bias = layer.weight, layer.bias

    def forward(self, x: Tensor) -> Tensor:
        rows = by_member(x, self.weight.shape[0])
        normal = F.layer_norm(rows, self.shape, None, None, self.eps)
        weight = self.weight.unsqueeze(1)
        out = normal * weight if self.bias is None else torch.addcmul(
            self.bias.unsqueeze(1), normal, weight)
        return out.reshape(x.shape)


class StackedEmbedding(nn.Module):
    """K embedding tables: weight [K, V, H]. Ids of one row (a position-id buffer that
    broadcasts over the batch) serve every row of the wide batch."""

    def __init__(self, layer: nn.Embedding) -> None:
        super().__init__()
        if layer.max_norm is not None or layer.scale_grad_by_freq or layer.sparse:
            raise ValueError("max_norm, scale_grad_by_freq and sparse do not stack")
        self.weight = layer.weight
        self.padding_idx = layer.padding_idx

    def forward(self, ids: Tensor) -> Tensor:
        members, vocab = self.weight.shape[:2]
        table = self.weight.reshape(members * vocab, -1)
        shared = ids.shape[0] == 1 and members > 1
        if not shared and ids.shape[0] % members:
            raise ValueError(f"ids of shape {tuple(ids.shape)} are not the members' rows")
        grouped = ids.unsqueeze(0) if shared else ids.reshape(members, -1, *ids.shape[1:])
        offsets = torch.arange(members, device=ids.device) * vocab
        out = F.embedding(grouped + offsets.view(-1, *[1] * (grouped.dim() - 1)), table)
        if self.padding_idx is not None:  # as nn.Embedding: no gradient reaches the padding row
            pad = (grouped == self.padding_idx).unsqueeze(-1)
            out = torch.where(pad, out.detach(), out)
        if shared:
            rows = draws.current().rows // members
            out = out.expand(members, rows, *out.shape[2:])
        return out.reshape(-1, *out.shape[2:])


class StackedGRUCell(nn.Module):
    """K GRU cells, computed as PyTorch's GRU cell computes them."""

    def __init__(self, cell: nn.GRUCell) -> None:
        super().__init__()
        if not cell.bias:
            raise ValueError("a GRU cell without biases is not stacked")
        self.ih = StackedLinear(cell.weight_ih, cell.bias_ih)
        self.hh = StackedLinear(cell.weight_hh, cell.bias_hh)

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        i_reset, i_input, i_new = self.ih(x).chunk(3, 1)
        h_reset, h_input, h_new = self.hh(h).chunk(3, 1)
        reset = (h_reset + i_reset).sigmoid()
        update = (h_input + i_input).sigmoid()
        new = (i_new + h_new * reset).tanh()
        return (h - new) * update + new


class SharedDropout(nn.Dropout):
    """`nn.Dropout` with one mask for every member (`draws.dropout`)."""

    def forward(self, x: Tensor) -> Tensor:
        return draws.dropout(x, self.p, self.training)


# Parameter-free layers that draw random numbers per row, and layers whose state a wide copy
# would not share with the members' models.
UNSHARED = (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout,
            nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def stacked_layer(module: nn.Module) -> nn.Module | None:
    """The stacked form of `module` (its parameters already the [K, ...] tensors); None where
    it needs none. Raises ValueError for a layer that cannot be stacked."""
    kind = type(module)
    if kind is nn.Linear:
        return StackedLinear(module.weight, module.bias)  # type: ignore[arg-type]
    if kind is nn.LayerNorm:
        return StackedLayerNorm(module)  # type: ignore[arg-type]
    if kind is nn.Embedding:
        return StackedEmbedding(module)  # type: ignore[arg-type]
    if kind is nn.GRUCell:
        return StackedGRUCell(module)  # type: ignore[arg-type]
    if kind is nn.Dropout:
        return SharedDropout(module.p)  # type: ignore[arg-type]
    if isinstance(module, UNSHARED):
        raise ValueError("its random draws or statistics are per row")
    if any(True for _ in module.parameters(recurse=False)):
        raise ValueError("a layer with parameters of this kind is not stacked")
    return None


def widen(lead: nn.Module, stacked: Mapping[str, Tensor]) -> nn.Module:
    """A copy of `lead` whose layers compute every member at once: its parameters are the
    stacked tensors of `stacked` (by `lead`'s parameter names), its buffers copies of the
    lead's. Raises CannotFuse naming each layer that cannot be stacked."""
    memo: dict[int, Any] = {id(p): stacked[name] for name, p in lead.named_parameters()}
    wide = copy.deepcopy(lead, memo)  # the stacked tensors in place of the lead's parameters
    problems = []
    for name, module in list(wide.named_modules()):
        try:
            replacement = stacked_layer(module)
        except ValueError as exc:
            problems.append(f"{name or 'the model'} ({type(module).__name__}) cannot run "
                            f"stacked: {exc}; train these runs one by one")
            continue
        if replacement is not None:
            parent, _, attr = name.rpartition(".")
            setattr(wide.get_submodule(parent), attr, replacement)
    if problems:
        raise CannotFuse(problems)
    for module in wide.modules():
        config = getattr(module, "config", None)
        if getattr(config, "_attn_implementation", None) in ("sdpa", "eager"):
            register_attention()
            config._attn_implementation = ATTENTION  # type: ignore[union-attr]
    return wide


def register_attention() -> None:
    """Make `ATTENTION` an attention implementation of transformers (masks as SDPA's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ATTENTION, stacked_attention)
    AttentionMaskInterface.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def stacked_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
                      attention_mask: Tensor | None, dropout: float = 0.0,
                      scaling: float | None = None, **kwargs: Any) -> tuple[Tensor, None]:
    """Attention over the wide batch [K*B, heads, T, d]. With dropout, the math kernel's
    computation (q and k each scaled by the root of the scale) with one mask for every member,
    drawn as the kernel draws it for one member's [B, heads, T, T]; without, SDPA itself."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if dropout == 0 or draws.current().members == 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    if getattr(module, "is_causal", False) or key.shape[1] != query.shape[1] or \
            kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None:
        raise ValueError("stacked attention with dropout serves bidirectional attention with "
                         "one key head per query head, without position bias or softcap")
    draws.current().attention_calls += 1
    root = math.sqrt(scaling if scaling is not None else query.shape[-1] ** -0.5)
    scores = (query * root) @ (key * root).transpose(-2, -1)
    if attention_mask is not None:
        scores = (scores.masked_fill(~attention_mask, -math.inf)
                  if attention_mask.dtype == torch.bool else scores + attention_mask)
    probs = draws.dropout(scores.softmax(-1), dropout, True)
    return (probs @ value).transpose(1, 2).contiguous(), None


def replicated(value: Any, k: int) -> Any:
    """A batch entry repeated for `k` members along its first dimension, member-major: the
    wide model's input."""
    if not isinstance(value, torch.Tensor) or not value.dim():
        return value
    return value.repeat(k, *[1] * (value.dim() - 1))


__all__ = ["ATTENTION", "SharedDropout", "StackedEmbedding", "StackedGRUCell",
           "StackedLayerNorm", "StackedLinear", "replicated", "stacked_attention", "widen"]
