"""A random-init BERT small enough to keep checkpoints of it in the repository (hidden 8),
with MiniLM's tokenizer; the same seed gives the same weights."""

from __future__ import annotations

from pathlib import Path


def build(path: Path) -> str:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from trainer.encoders import default_encoder_path

    tokenizer = AutoTokenizer.from_pretrained(default_encoder_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16, max_position_embeddings=128)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
