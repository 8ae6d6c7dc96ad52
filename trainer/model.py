"""The MT-DNN: one shared pretrained encoder, one small head per task. Pure nn."""

from __future__ import annotations

import inspect
import math
from functools import partial
from typing import Any, cast

import torch
from torch import nn

from weightsearch.core.errors import ConfigError
from weightsearch.trainer.heads import Encoded, Head, build_head
from weightsearch.trainer.mixture import MixtureSettings
from weightsearch.trainer.tasks import TaskSpec

POOLINGS = ("pooler", "cls", "mean", "task-pooler")


class MixtureOfExperts(nn.Module):
    """MMoE (trainer/mixture.py): expert feed-forward networks on the token states, and one
    softmax gate per task, per example (Ma et al.) or per token."""

    def __init__(self, settings: MixtureSettings, hidden: int, tasks: list[str]) -> None:
        super().__init__()
        width = settings.expert_hidden or hidden
        self.per_example = settings.gate == "example"
        self.residual = settings.residual
        experts = [nn.Sequential(nn.Linear(hidden, width), nn.GELU(), nn.Linear(width, hidden))
                   for _ in range(settings.experts)]
        self.experts = nn.ModuleList(experts)
        self.gates = nn.ModuleDict({t: nn.Linear(hidden, settings.experts) for t in tasks})
        if self.residual:  # small expert outputs at first: the pretrained states dominate
            for expert in experts:
                out = cast(nn.Linear, expert[2])
                nn.init.normal_(out.weight, std=0.02 / math.sqrt(settings.experts))
                nn.init.zeros_(out.bias)

    def gate(self, task: str, states: torch.Tensor,
             mask: torch.Tensor | None = None) -> torch.Tensor:
        """The task's weights of the experts, summing to 1: [N, 1, experts] per example (from
        the mean of its unmasked token states), [N, T, experts] per token."""
        if not self.per_example:
            return self.gates[task](states).softmax(-1)
        weights = (torch.ones(states.shape[:2], device=states.device) if mask is None
                   else mask).unsqueeze(-1).to(states.dtype)
        summary = (states * weights).sum(1) / weights.sum(1).clamp(min=1)
        return self.gates[task](summary).softmax(-1).unsqueeze(1)

    def forward(self, task: str, states: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        gate = self.gate(task, states, mask)
        experts = torch.stack([expert(states) for expert in self.experts], dim=-1)
        mixture = (experts * gate.unsqueeze(-2)).sum(-1)
        return states + mixture if self.residual else mixture


class MTDNN(nn.Module):
    def __init__(self, encoder: Any, tasks: tuple[TaskSpec, ...], pooling: str = "pooler",
                 mixture: MixtureSettings | None = None) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}")
        # encoder: a transformers model, whose config, embeddings and pooler are its
        # architecture's own (nn.Module's __getattr__ would type each Tensor | Module).
        self.encoder = encoder
        hidden = encoder.config.hidden_size
        self.heads = nn.ModuleDict({t.name: build_head(t, hidden) for t in tasks})
        # The reference MT-DNN code ignores the encoder's pooler and gives every task its own.
        self.task_poolers = nn.ModuleDict(
            {t.name: nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) for t in tasks}
            if pooling == "task-pooler" else {}
        )
        self.mixture = (MixtureOfExperts(mixture, hidden, [t.name for t in tasks])
                        if mixture is not None else None)
        # MT-DNN feeds the heads BERT's pooled [CLS] vector; an encoder without a pooler gives
        # the raw [CLS] state, and sentence encoders the mean of their token states.
        has_pooler = getattr(encoder, "pooler", None) is not None
        self.pooling = "cls" if pooling == "pooler" and not has_pooler else pooling

    def head(self, task: str) -> Head:
        return self.heads[task]  # type: ignore[return-value]

    def embedding_output(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """What the encoder's embedding layer gives the batch (word, position and segment
        embeddings, LayerNorm, dropout): the input SMART perturbs."""
        layer = self.encoder.embeddings
        inputs = {"input_ids": batch["input_ids"]}
        if batch.get("token_type_ids") is not None and "token_type_ids" in \
                inspect.signature(layer.forward).parameters:  # DistilBERT has no segments
            inputs["token_type_ids"] = batch["token_type_ids"]
        return layer(**inputs)

    def forward(
        self, task: str, batch: dict[str, torch.Tensor],
        embedding_output: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Head outputs for a batch; `embedding_output` replaces what the embedding layer gives
        (adversarial training perturbs it)."""
        hook, encoder = None, self.encoder
        if embedding_output is not None:
            # A compiled encoder does not see hooks added after it compiled: its own module does.
            encoder = getattr(self.encoder, "_orig_mod", self.encoder)
            hook = encoder.embeddings.register_forward_hook(
                lambda _module, _args, _out: embedding_output)
        try:
            out = encoder(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                token_type_ids=batch.get("token_type_ids"),
            )
        finally:
            if hook is not None:
                hook.remove()
        hidden = out.last_hidden_state
        if self.mixture is not None:
            hidden = self.mixture(task, hidden, batch["attention_mask"])
        pooler_output = out.pooler_output if self.mixture is None else None
        states = Encoded(hidden, batch["attention_mask"], partial(self._pool, task,
                                                                  pooler_output))
        return self.heads[task](states, batch)

    def _pool(self, task: str, pooler_output: torch.Tensor | None, hidden: torch.Tensor,
              mask: torch.Tensor) -> torch.Tensor:
        """The run's sentence vector of each row."""
        if self.pooling == "pooler":
            return pooler_output if pooler_output is not None else self.encoder.pooler(hidden)
        if self.pooling == "mean":
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
        if self.pooling == "task-pooler":
            return self.task_poolers[task](hidden[:, 0])
        return hidden[:, 0]


# The config keys of an encoder's attention-probability dropout (BERT, RoBERTa, MiniLM, ELECTRA:
# the first; DistilBERT and others: the second).
ATTENTION_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout")


def load_encoder(name_or_path: str, seed: int,
                 attention_dropout: float | None = None) -> nn.Module:
    """Load a pretrained encoder offline-capable, with PyTorch SDPA attention where supported;
    `attention_dropout` replaces its attention-probability dropout (None: its own)."""
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(seed)  # a pooler missing from a checkpoint is initialised reproducibly
    extra: dict[str, float] = {}
    if attention_dropout is not None:
        config = AutoConfig.from_pretrained(name_or_path)
        key = next((k for k in ATTENTION_DROPOUT_KEYS if hasattr(config, k)), None)
        if key is None:
            raise ConfigError([f"attention_dropout: the encoder {name_or_path!r} has no "
                               f"attention dropout setting ({' or '.join(ATTENTION_DROPOUT_KEYS)}"
                               " in its config); leave attention_dropout out"])
        extra[key] = float(attention_dropout)
    try:
        return AutoModel.from_pretrained(name_or_path, attn_implementation="sdpa", **extra)
    except (ValueError, ImportError):
        return AutoModel.from_pretrained(name_or_path, **extra)


def recompute_activations(encoder: Any, name: str) -> None:  # a transformers model
    """Activation checkpointing of the encoder's layers in training mode, through transformers'
    own support; the dropout masks are drawn again from the saved random state, so the
    gradients are those of the plain backward pass."""
    if not getattr(encoder, "supports_gradient_checkpointing", False):
        raise ConfigError([f"recompute_activations: the encoder {name!r} does not support "
                           "recomputing its activations; leave recompute_activations out"])
    if getattr(encoder.config, "use_cache", None):  # a decoder's cache cannot be recomputed
        encoder.config.use_cache = False
    # Non-reentrant: it recomputes under the forward pass's autocast state and works when the
    # inputs need no gradient (the embeddings' output does; an adversarial perturbation too).
    kwargs = {"use_reentrant": False}
    if hasattr(encoder, "activation_checkpointing_enable"):  # its name since transformers 5.x
        encoder.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
