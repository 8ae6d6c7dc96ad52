"""The MT-DNN: one shared pretrained encoder, one small head per task. Pure nn."""

from __future__ import annotations

import torch
from torch import nn

from trainer.heads import Head, build_head
from trainer.tasks import TaskSpec


class MTDNN(nn.Module):
    def __init__(
        self, encoder: nn.Module, tasks: tuple[TaskSpec, ...], pooling: str = "pooler"
    ) -> None:
        super().__init__()
        if pooling not in ("pooler", "cls", "mean", "task-pooler"):
            raise ValueError(f"pooling must be pooler, cls, mean or task-pooler, not {pooling!r}")
        self.encoder = encoder
        hidden = encoder.config.hidden_size
        self.heads = nn.ModuleDict({t.name: build_head(t, hidden) for t in tasks})
        # The reference MT-DNN code ignores the encoder's pooler and gives every task its own.
        self.task_poolers = nn.ModuleDict(
            {t.name: nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) for t in tasks}
            if pooling == "task-pooler" else {}
        )
        # MT-DNN feeds the heads BERT's pooled [CLS] vector; an encoder without a pooler gives
        # the raw [CLS] state, and sentence encoders the mean of their token states.
        has_pooler = getattr(encoder, "pooler", None) is not None
        self.pooling = "cls" if pooling == "pooler" and not has_pooler else pooling

    def head(self, task: str) -> Head:
        return self.heads[task]  # type: ignore[return-value]

    def forward(
        self, task: str, batch: dict[str, torch.Tensor], embeds: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Head outputs for a batch; `embeds` replaces the word embeddings of its input ids
        (adversarial training perturbs them)."""
        out = self.encoder(
            input_ids=None if embeds is not None else batch["input_ids"],
            inputs_embeds=embeds,
            attention_mask=batch["attention_mask"],
            token_type_ids=batch.get("token_type_ids"),
        )
        hidden = out.last_hidden_state
        if self.pooling == "pooler":
            pooled = out.pooler_output
        elif self.pooling == "mean":
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        elif self.pooling == "task-pooler":
            pooled = self.task_poolers[task](hidden[:, 0])
        else:
            pooled = hidden[:, 0]
        return self.heads[task](pooled)


def load_encoder(name_or_path: str, seed: int) -> nn.Module:
    """Load a pretrained encoder offline-capable, with PyTorch SDPA attention where supported."""
    from transformers import AutoModel

    torch.manual_seed(seed)  # a pooler missing from a checkpoint is initialised reproducibly
    try:
        return AutoModel.from_pretrained(name_or_path, attn_implementation="sdpa")
    except (ValueError, ImportError):
        return AutoModel.from_pretrained(name_or_path)
