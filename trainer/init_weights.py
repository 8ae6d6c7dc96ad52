"""Initial weights of the task heads and task poolers.

PyTorch's default for a new `nn.Linear` is Kaiming-uniform, which gives a 384-wide layer
weights of up to 1/sqrt(384) ~ 0.05 in magnitude. The reference MT-DNN code (SIWLM's copy)
draws them from BERT's N(0, 0.02) and zeroes the biases: `head_init: normal`.
"""

from __future__ import annotations

from torch import nn

from weightsearch.trainer.config.optim_settings import HEAD_INIT_STD


def init_head_weights(model: nn.Module, scheme: str, std: float = HEAD_INIT_STD) -> int:
    """Re-initialise every Linear layer of `model.heads` and `model.task_poolers` under
    `scheme` ("default" keeps PyTorch's); returns how many layers were set. The encoder
    and a mixture of experts keep their weights."""
    if scheme == "default":
        return 0
    if scheme != "normal":
        raise ValueError(f"head_init must be default or normal, not {scheme!r}")
    count = 0
    for part in ("heads", "task_poolers"):
        module = getattr(model, part, None)
        if module is None:
            continue
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                nn.init.normal_(layer.weight, mean=0.0, std=std)
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
                count += 1
    return count
