"""Random-init BERT encoders with MiniLM's tokenizer, for tests: the same seed and shape give
the same weights. The release fixture's is small enough to keep checkpoints of it in the
repository (hidden 8); the test suite's `tiny_encoder` fixture is hidden 32."""

from __future__ import annotations

from pathlib import Path


def build(path: Path, hidden: int = 8, layers: int = 1, heads: int = 2, intermediate: int = 16,
          positions: int = 128) -> str:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from weightsearch.trainer.encoders import default_encoder_path

    tokenizer = AutoTokenizer.from_pretrained(default_encoder_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden,
                        num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=intermediate, max_position_embeddings=positions)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
