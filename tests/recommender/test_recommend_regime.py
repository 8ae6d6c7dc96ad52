"""Regimes beyond encoder and stage (encoder size, weighting variant), encoders without evidence,
and the recommender's small contracts (train-size messages, the law cache under threads)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from weightsearch.cli import main
from weightsearch.core.errors import ConfigError
from weightsearch.recommender.asking import check_train_size
from weightsearch.recommender.evidence import point_from_scores, prior_evidence
from weightsearch.recommender.recommend import recommend_from
from weightsearch.recommender.regime import VARIANTS, encoder_size, size_from_config
from weightsearch.studies import schema as S

PEAK_AT_3 = {1.0: 72.0, 3.0: 78.0, 6.0: 74.0, 9.0: 71.0, 12.0: 69.0, 15.0: 68.0}
PEAK_AT_12 = {1.0: 68.0, 3.0: 69.0, 6.0: 71.0, 9.0: 74.0, 12.0: 78.0, 15.0: 75.0}


def study(task: str, size: int, means: dict[float, float], encoder: str | None = "minilm",
          stage: str | None = "multitask", variant: str | None = None,
          encoder_size: str | None = None, clipping: str | None = None):
    values = {w: [m - 0.5, m, m + 0.5] for w, m in means.items()}
    return point_from_scores(task, f"mine/{task}", size, "classification", "studies", values, True,
                             encoder, stage, variant, encoder_size, clipping=clipping)


def test_variant_is_part_of_the_regime() -> None:
    ref = [study(f"r{i}", n, PEAK_AT_3, variant="reference") for i, n in
           enumerate((1500, 3000, 6000, 9000))]
    paper = [study(f"p{i}", n, PEAK_AT_12, variant="paper") for i, n in
             enumerate((1500, 3000, 6000))]
    evidence = [*ref, *paper]
    a = recommend_from(evidence, 3000, encoder="minilm", variant="paper")
    b = recommend_from(evidence, 3000, encoder="minilm", variant="reference")
    assert a.regime["variant"] == "paper" and b.regime["variant"] == "reference"
    assert b.central_weight < 6 < 9 < a.central_weight
    assert all(e["discounted"] == (e["variant"] != "paper") for e in a.evidence)
    assert any("differs in variant" in n for n in a.notes)
    # Unasked, the variant with the most evidence wins.
    assert recommend_from(evidence, 3000, encoder="minilm").regime["variant"] == "reference"
    with pytest.raises(ConfigError, match="variant must be one of reference, paper"):
        recommend_from(evidence, 3000, variant="fancy")


def test_variants_match_the_trainers() -> None:
    from weightsearch.trainer.weighting._siwlm import VARIANTS as TRAINER_VARIANTS

    assert tuple(VARIANTS) == tuple(TRAINER_VARIANTS)


def test_encoder_size_is_part_of_the_regime(tmp_path: Path) -> None:
    """Two local folders named alike but of different sizes are different regimes; an unknown
    size (an import that did not record it) disagrees with none."""
    small = [study(f"s{i}", n, PEAK_AT_3, encoder="/ckpt/encoder", encoder_size="256x4")
             for i, n in enumerate((1500, 3000, 6000))]
    large = [study(f"l{i}", n, PEAK_AT_12, encoder="/other/encoder", encoder_size="1024x24")
             for i, n in enumerate((1500, 3000, 6000, 9000))]
    loose = study("u", 3000, PEAK_AT_3, encoder="encoder", encoder_size=None)
    rec = recommend_from([*small, *large, loose], 3000, encoder="encoder")
    assert rec.regime["encoder_size"] == "1024x24" and rec.central_weight > 6
    assert {e["task"] for e in rec.evidence if e["discounted"]} == {"s0", "s1", "s2"}
    assert any("differs in encoder size" in n for n in rec.notes)
    assert rec.evidence and all(e["encoder_size"] for e in rec.evidence)


def test_encoder_size_from_a_folder_a_known_name_or_unknown(tmp_path: Path,
                                                            tiny_encoder: str) -> None:
    assert encoder_size(tiny_encoder) == "32x2"  # the fixture's config.json
    distil = tmp_path / "distil"
    distil.mkdir()
    (distil / "config.json").write_text(json.dumps({"dim": 768, "n_layers": 6}))
    assert size_from_config(distil) == "768x6" and encoder_size(str(distil)) == "768x6"
    assert encoder_size("sentence-transformers/all-MiniLM-L6-v2") == "384x6"
    assert encoder_size("bert-base-uncased") == "768x12"
    assert encoder_size("my-own-encoder") == "unknown" and encoder_size(None) == "unknown"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert encoder_size(str(broken)) == "unknown"
    prior = prior_evidence()[0]
    assert prior.regime.size == "768x12" and prior.regime.variant == "reference"


def test_a_launched_study_records_its_encoder_size(sample_data_dir: Path,
                                                   tiny_encoder: str) -> None:
    from weightsearch.sweep.spec import load_study_spec
    from weightsearch.sweep.study_db import describe

    spec = load_study_spec({"study": "sized", "train": {
        "data_dir": str(sample_data_dir), "tasks": ["rte", "sst2"], "epochs": 1,
        "encoder": tiny_encoder}, "central_tasks": ["rte"], "weights": [1, 9]})
    attrs = describe(spec, "rte").attrs
    assert attrs[S.A_ENCODER_SIZE] == "32x2" and attrs[S.A_VARIANT] == "reference"


def test_an_encoder_nobody_used_is_answered_from_the_others_and_said(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["recommend", "--train-size", "2500", "--encoder", "my-lab/tiny-encoder",
                 "--storage", url, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unmatched_encoder"] == {"asked": "my-lab/tiny-encoder", "known_encoder": False,
                                        "encoders_with_evidence": ["all-minilm-l6-v2",
                                                                   "bert-base-uncased"]}
    assert any("no study used encoder my-lab/tiny-encoder" in n and "check the spelling" in n
               and "bert-base-uncased" in n for n in out["notes"])
    assert all(e["discounted"] for e in out["evidence"])
    assert main(["recommend", "--train-size", "2500", "--encoder", "roberta-base",
                 "--storage", url]) == 0
    text = capsys.readouterr().out
    assert "no study used encoder roberta-base;" in text and "check the spelling" not in text
    # The evidence's own encoder: nothing unmatched.
    assert recommend_from(prior_evidence(), 2500, encoder="bert-base-uncased") \
        .unmatched_encoder is None
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("typo, meant", [("robertta-base", "roberta-base"),
                                         ("bert-base-uncsed", "bert-base-uncased"),
                                         ("all-MiniLM-L6-v3", "all-minilm-l6-v2")])
def test_a_misspelt_encoder_is_refused_with_the_name_meant(tmp_path, capsys, typo,
                                                           meant) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["recommend", "--train-size", "2500", "--encoder", typo,
                 "--storage", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"did you mean {meant}" in captured.err
    assert "Traceback" not in captured.err and not (tmp_path / "none.db").exists()


def test_http_says_which_encoder_had_no_evidence(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app

    client = TestClient(create_app(f"sqlite:///{tmp_path / 'h.db'}"))
    r = client.get("/recommend", params={"train_size": 2500, "encoder": "my-lab/encoder"})
    assert r.status_code == 200
    body = r.json()
    assert body["unmatched_encoder"]["asked"] == "my-lab/encoder"
    typo = client.get("/recommend", params={"train_size": 2500, "encoder": "robertta-base"})
    assert typo.status_code == 400 and "did you mean roberta-base" in typo.json()["detail"]
    assert body["regime"]["encoder_size"] == "unknown"
    plain = client.get("/recommend", params={"train_size": 2500}).json()
    # No studies in the storage: the default encoder's regime (MiniLM, 384 x 6 layers).
    assert plain["unmatched_encoder"] is None and plain["regime"]["encoder_size"] == "384x6"
    assert client.get("/recommend", params={"train_size": 2500,
                                            "encoder": "no such!"}).status_code == 422


@pytest.mark.parametrize("given, shown", [
    ("9" * 25, "a 25-digit number"), ("9" * 5000, "a 5000-digit number"),
    (10 ** 30, "a 31-digit number"), (10 ** 13, "got 10000000000000;"),
    (10 ** 20000, "a 20001-digit number"),
], ids=["25 digits", "5000-digit text", "10^30", "10^13", "10^20000"])
def test_huge_train_sizes_are_described_by_their_digits(given, shown) -> None:
    with pytest.raises(ConfigError) as err:
        check_train_size(given)
    assert shown in str(err.value)


def test_leading_zeros_are_no_huge_number() -> None:
    assert check_train_size("0" * 30 + "2500") == 2500


def test_law_cache_is_safe_under_threads() -> None:
    """The service answers from several worker threads, all sharing the cache of fitted laws."""
    rng = np.random.default_rng(0)
    lists = [[study(f"t{i}", int(10 ** rng.uniform(2.5, 5.5)), PEAK_AT_3 if i % 2 else PEAK_AT_12)
              for i in range(6)] for _ in range(12)]
    expected = [recommend_from(ev, 3000).to_dict() for ev in lists]
    got: dict[int, dict] = {}
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            for _ in range(5):
                got[i] = recommend_from(lists[i % len(lists)], 3000).to_dict()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(got[i] == expected[i % len(lists)] for i in range(24))


def test_unasked_the_regime_is_the_users_own_else_the_default_encoders() -> None:
    """The published rows (BERT-base, fine-tuned) outnumber a user's studies; unasked, the
    answer is still for the user's own regime, and without studies for the default encoder's."""
    from weightsearch.recommender.evidence import builtin_evidence
    from weightsearch.recommender.regime import DEFAULT_ENCODER
    from weightsearch.trainer.config import DEFAULT_ENCODER as TRAINER_DEFAULT

    assert DEFAULT_ENCODER == TRAINER_DEFAULT
    builtin = builtin_evidence()  # the paper's Table 2 and the shipped MiniLM ladder
    own = [study(f"t{i}", n, PEAK_AT_12, encoder="/models/my-encoder", encoder_size="256x4")
           for i, n in enumerate((800, 2000))]
    rec = recommend_from([*builtin, *own], 3000)
    assert rec.regime["encoder"] == "/models/my-encoder"
    assert any("the regime of your own studies (2 central tasks)" in n for n in rec.notes)
    assert {e["task"] for e in rec.evidence if not e["discounted"]} == {"t0", "t1"}
    alone = recommend_from(builtin, 3000)
    assert alone.regime["encoder"].lower() == DEFAULT_ENCODER.lower()
    assert any("the default encoder's" in n and "no studies of your own" in n
               for n in alone.notes)
    # Asked for, another regime is answered for as before.
    paper = recommend_from([*builtin, *own], 3000, encoder="bert-base-uncased")
    assert paper.regime["encoder"] == "bert-base-uncased"


def test_a_launched_study_that_locates_nothing_never_sets_the_regime() -> None:
    """Two toy studies of one's own, one in uclip1 whose curve is flat (no say in the answer):
    the answer stays in the default encoder's regime, with a note naming what was passed
    over; a uclip1 study that does locate a best weight sets the regime as before."""
    from weightsearch.recommender.evidence import builtin_evidence

    builtin = builtin_evidence()
    flat = {w: 70.0 for w in (1.0, 3.0, 9.0, 15.0)}
    toy = study("toy", 120, flat, encoder="all-MiniLM-L6-v2", clipping="uclip1")
    assert toy.informativeness < 0.1
    rec = recommend_from([*builtin, toy], 1200)
    assert rec.regime["clipping"] == "clip1" and rec.regime["encoder"] == "all-minilm-l6-v2"
    note = next(n for n in rec.notes if n.startswith("regime:"))
    assert "passed over as the regime" in note and "uclip1" in note, note
    peaked = study("toy", 120, PEAK_AT_12, encoder="all-MiniLM-L6-v2", clipping="uclip1")
    assert recommend_from([*builtin, peaked], 1200).regime["clipping"] == "uclip1"


def test_the_recommendation_plot_marks_discounted_points_and_keeps_labels_apart() -> None:
    """Every task is named without two names printed over one another, and points of another
    regime than the one answered for are hollow (and say so in the legend)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.transforms import Bbox

    from weightsearch.recommender.evidence import builtin_evidence
    from weightsearch.recommender.report import recommendation_figure

    evidence = builtin_evidence()
    rec = recommend_from(evidence, 3000)  # MiniLM: the paper's BERT-base rows are discounted
    fig = recommendation_figure(evidence, rec)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    names = [t for t in ax.texts if t.get_text() in {p.task for p in evidence}]
    assert sorted(t.get_text() for t in names) == sorted(p.task for p in evidence)
    boxes = [t.get_window_extent(renderer) for t in names]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            shared = Bbox.intersection(a, b)
            assert shared is None or shared.width * shared.height < 1.0
    labels = ax.get_legend_handles_labels()[1]
    assert any("SIWLM paper (another regime: discounted)" in label for label in labels)
    assert any("sst2-ladder" in label and "discounted" not in label for label in labels)
    hollow = [line for line in ax.lines if line.get_markerfacecolor() == "none"]
    # one hollow series per discounted study (the paper's, the clipping study's unclipped cells)
    assert sum(len(line.get_xdata()) for line in hollow) == \
        sum(e["discounted"] for e in rec.evidence)


def _clipped(task: str, size: int, means: dict[float, float], clipping: str):
    return study(task, size, means, variant="reference", clipping=clipping)


def test_clipping_is_part_of_the_regime() -> None:
    """Scores trained without clipping are another regime than the reference's clip1: each
    answers for its own, discounts the other through one offset, and clip1 is the default."""
    clipped = [_clipped(f"c{i}", n, PEAK_AT_3, "clip1") for i, n in
               enumerate((1500, 3000, 6000))]
    free = [_clipped(f"n{i}", n, PEAK_AT_12, "noclip") for i, n in
            enumerate((1500, 3000, 6000, 9000))]
    evidence = [*clipped, *free]
    a = recommend_from(evidence, 3000, encoder="minilm", clipping="noclip")
    b = recommend_from(evidence, 3000, encoder="minilm", clipping="clip1")
    assert a.regime["clipping"] == "noclip" and b.regime["clipping"] == "clip1"
    assert b.central_weight < 6 < 9 < a.central_weight
    assert all(e["discounted"] == (e["clipping"] != "noclip") for e in a.evidence)
    assert any("differs in clipping" in n for n in a.notes)
    # Unasked: the trainer's default clipping, though the other has more evidence.
    assert recommend_from(evidence, 3000, encoder="minilm").regime["clipping"] == "clip1"
    # The same data under two clippings counts twice: they are not one measurement.
    same = [_clipped("sst2", 700, PEAK_AT_3, "clip1"), _clipped("sst2", 700, PEAK_AT_12,
                                                                 "noclip")]
    rec = recommend_from(same + clipped, 700, encoder="minilm", clipping="clip1")
    assert {e["clipping"] for e in rec.evidence if e["task"] == "sst2"} == {"clip1", "noclip"}


@pytest.mark.parametrize("bad", ["clip", "global", "clip1;drop", "uclip-1", "x" * 50])
def test_a_bad_clipping_is_refused(bad, capsys) -> None:
    with pytest.raises(ConfigError, match="clipping must be clip<norm>"):
        recommend_from(prior_evidence(), 3000, clipping=bad)
    assert main(["recommend", "--train-size", "3000", "--clipping", bad]) == 2
    assert "clipping must be" in capsys.readouterr().err


def test_the_prior_and_the_ladder_are_clip1() -> None:
    from weightsearch.recommender.evidence import shipped_evidence

    assert {p.clipping for p in prior_evidence()} == {"clip1"}
    assert {p.clipping for p in shipped_evidence() if p.study == "sst2-ladder"} == {"clip1"}


def test_a_clipping_is_read_as_the_evidence_spells_it() -> None:
    points = [_clipped(f"c{i}", n, PEAK_AT_3, "clip1") for i, n in enumerate((1500, 3000))]
    assert recommend_from(points, 3000, clipping="clip1.0").regime["clipping"] == "clip1"
    with pytest.raises(ConfigError, match="a norm of 0 is noclip"):
        recommend_from(points, 3000, clipping="clip0")


@pytest.mark.slow  # 4-5 s: at the fast tier's limit on a 2-core machine
def test_the_published_clipping_pattern_accepts_exactly_what_the_recommender_does():
    """The HTTP schema's pattern and `normalize_clipping` agree, so a client that follows the
    schema is never refused (a schema-valid value such as `uclip58e6-E` once answered 400)."""
    import re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from weightsearch.core.errors import ConfigError
    from weightsearch.recommender.asking import CLIPPING_PATTERN, normalize_clipping

    pattern = re.compile(CLIPPING_PATTERN)

    def accepted(value: str) -> bool:
        try:
            normalize_clipping(value)
        except ConfigError:
            return False
        return True

    for value in ("clip1", "uclip0.5", "clip.5", "clip5.", "noclip", "clip2E+5", "clip1e-99",
                  "clip0", "clip0.0", "uclip58e6-E", "clip1e999", "clip-1", "clip0e5", "uclip",
                  "rate-clip1", "rate-noclip", "rate-uclip2", "rate-clip0", "rate-",
                  "rate-rate-clip1"):
        assert bool(pattern.match(value)) == accepted(value), value

    @settings(max_examples=300, deadline=None)
    @given(st.from_regex(CLIPPING_PATTERN, fullmatch=True).filter(lambda v: len(v) <= 40)
           | st.from_regex(r"u?clip[0-9.eE+-]{0,8}", fullmatch=True))
    def agree(value: str) -> None:
        assert bool(pattern.match(value)) == accepted(value), value

    agree()
