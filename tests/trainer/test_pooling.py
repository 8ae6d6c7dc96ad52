"""What the heads see: BERT's pooler, the [CLS] state, or the mean of the token states."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertConfig, BertModel

from weightsearch.trainer.encoders import resolve_pooling, trained_pooling
from weightsearch.trainer.model import MTDNN
from weightsearch.trainer.tasks import TASK_PRESETS


def _tiny_bert(add_pooler: bool = True) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32)
    return BertModel(config, add_pooling_layer=add_pooler).eval()


def _sentence_transformers_folder(path, mean: bool, cls: bool):
    (path / "1_Pooling").mkdir(parents=True)
    (path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
    ]))
    (path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_mean_tokens": mean, "pooling_mode_cls_token": cls}))
    return str(path)


def test_the_bundled_minilm_was_trained_with_mean_pooling(minilm_path):
    assert trained_pooling(minilm_path) == "mean"
    assert resolve_pooling("auto", minilm_path) == "mean"


def test_auto_follows_the_folder_then_falls_back_to_bert(tmp_path):
    cls_folder = _sentence_transformers_folder(tmp_path / "cls", mean=False, cls=True)
    assert resolve_pooling("auto", cls_folder) == "cls"
    max_folder = _sentence_transformers_folder(tmp_path / "max", mean=False, cls=False)
    assert trained_pooling(max_folder) is None
    assert resolve_pooling("auto", max_folder) == "pooler"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert resolve_pooling("auto", str(plain)) == "pooler"
    # ... and an encoder without a pooling layer then feeds the heads its [CLS] state
    no_pooler = _tiny_bert(add_pooler=False)
    auto = resolve_pooling("auto", str(plain))
    assert MTDNN(no_pooler, (TASK_PRESETS["rte"],), auto).pooling == "cls"
    (plain / "modules.json").write_text("not json")
    assert resolve_pooling("auto", str(plain)) == "pooler"


def test_an_explicit_setting_wins_over_the_folder(minilm_path):
    assert resolve_pooling("pooler", minilm_path) == "pooler"
    no_pooler = _tiny_bert(add_pooler=False)
    model = MTDNN(no_pooler, (TASK_PRESETS["rte"],), resolve_pooling("pooler", minilm_path))
    assert model.pooling == "cls"
    assert resolve_pooling("cls", minilm_path) == "cls"


@pytest.mark.parametrize("pooling", ["pooler", "cls", "mean"])
def test_each_pooling_feeds_the_head_what_it_says(pooling):
    encoder = _tiny_bert()
    model = MTDNN(encoder, (TASK_PRESETS["rte"],), pooling).eval()
    ids = torch.tensor([[2, 7, 9, 3, 0, 0], [2, 5, 6, 8, 4, 3]])
    mask = (ids != 0).long()
    batch = {"input_ids": ids, "attention_mask": mask}
    seen = {}
    # what the head's layer reads (its dropout is off in eval mode)
    model.heads["rte"].proj.register_forward_hook(lambda _m, args, _o: seen.update(x=args[0]))
    with torch.no_grad():
        model("rte", batch)
        out = encoder(input_ids=ids, attention_mask=mask)
    hidden = out.last_hidden_state
    expected = {
        "pooler": out.pooler_output,
        "cls": hidden[:, 0],
        # padding positions are left out of the mean: row 0 averages its 4 real tokens
        "mean": torch.stack([hidden[0, :4].mean(0), hidden[1].mean(0)]),
    }[pooling]
    torch.testing.assert_close(seen["x"], expected)


def test_mean_pooling_ignores_what_padding_holds():
    model = MTDNN(_tiny_bert(), (TASK_PRESETS["rte"],), "mean").eval()
    short = {"input_ids": torch.tensor([[2, 7, 9, 3]]), "attention_mask": torch.ones(1, 4).long()}
    padded = {"input_ids": torch.tensor([[2, 7, 9, 3, 0, 0, 0]]),
              "attention_mask": torch.tensor([[1, 1, 1, 1, 0, 0, 0]])}
    with torch.no_grad():
        torch.testing.assert_close(model("rte", short), model("rte", padded))


def test_pooler_without_a_pooling_layer_uses_cls():
    model = MTDNN(_tiny_bert(add_pooler=False), (TASK_PRESETS["rte"],), "pooler")
    assert model.pooling == "cls"
    with pytest.raises(ValueError, match="pooling must be"):
        MTDNN(_tiny_bert(), (TASK_PRESETS["rte"],), "max")
