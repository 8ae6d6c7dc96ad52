"""The study shipped in recommender/data/: it imports cleanly, and the recommender answers for
MiniLM from it and says so."""

from __future__ import annotations

import json

from weightsearch.cli import main
from weightsearch.recommender.evidence import builtin_evidence, load_evidence
from weightsearch.recommender.recommend import recommend
from weightsearch.recommender.shipped import DATA, SHIPPED
from weightsearch.studies.import_rows import parse_rows
from weightsearch.studies.importer import import_file
from weightsearch.studies.reading import open_quiet, read_all

LADDER = DATA / "sst2_ladder_minilm.csv"
CLIP = DATA / "sst2_clip_minilm.csv"
RATE = DATA / "sst2_rate_ladder_minilm.csv"


def test_the_ladder_file_is_what_its_readme_says():
    rows = parse_rows(LADDER)
    assert {r.central_task: r.train_size for r in rows} == {
        "sst2_125": 125, "sst2_700": 700, "sst2_4000": 4000}
    assert {r.dataset for r in rows} == {"sst2"}
    assert {tuple(sorted(r.regime.items())) for r in rows} == {
        (("clipping", "clip1"), ("encoder", "all-MiniLM-L6-v2"), ("stage", "multitask"),
         ("variant", "reference"))}
    assert {r.weight for r in rows} <= {1, 3, 6, 9, 12, 15} and {r.seed for r in rows} <= {1, 2, 3}
    assert all(0.4 < r.metric < 1 for r in rows)  # SST-2 dev accuracy, above chance
    assert [s.file for s in SHIPPED] == [LADDER.name, CLIP.name, RATE.name]


def test_the_clipping_file_is_what_its_readme_says():
    rows = parse_rows(CLIP)
    assert {r.central_task: r.regime["clipping"] for r in rows} == {
        "sst2_700-clip1": "clip1", "sst2_700-noclip": "noclip", "sst2_700-uclip1": "uclip1"}
    assert {r.dataset for r in rows} == {"sst2"} and {r.train_size for r in rows} == {700}
    cells = {(r.central_task, r.weight, r.seed) for r in rows}
    assert cells == {(t, w, s) for t in ("sst2_700-clip1", "sst2_700-noclip", "sst2_700-uclip1")
                     for w in (1.0, 3.0, 15.0) for s in range(1, 9)}
    assert all(0 <= r.clip_share <= 1 and r.central_norm > 0 for r in rows)
    assert {r.clip_share for r in rows if r.regime["clipping"] == "noclip"} == {0.0}
    # Weight 15 under the reference's clipping: every central update clipped, every seed.
    assert {r.clip_share for r in rows if r.central_task == "sst2_700-clip1"
            and r.weight == 15} == {1.0}
    # The recommender reads it as two regimes of one dataset.
    points = [p for p in builtin_evidence() if p.study == "clip-weight"]
    assert {p.clipping for p in points} == {"clip1", "noclip", "uclip1"}


def test_the_rate_ladder_file_is_what_its_readme_says():
    rows = parse_rows(RATE)
    cells = {(r.central_task, r.weight, r.seed) for r in rows}
    assert cells == {(f"sst2_{n}", w, s) for n in (125, 700, 4000)
                     for w in (1.0, 2.0, 4.0, 8.0, 15.0) for s in range(1, 5)}
    assert {r.acts_on for r in rows} == {"sampling"} and {r.dataset for r in rows} == {"sst2"}
    assert {r.regime["clipping"] for r in rows} == {"rate-clip1"}
    assert all(0.4 < r.metric < 1 for r in rows)
    # A sampling rate is never judged one treatment by its clip records.
    points = [p for p in builtin_evidence() if p.study == "sst2-rate-ladder"]
    assert {p.clipping for p in points} == {"rate-clip1"}
    assert all(p.saturated_from is None for p in points)


def test_it_imports_and_then_counts_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'mine.db'}"
    names = import_file(LADDER, "sst2-ladder", url)
    assert sorted(names) == ["sst2-ladder/sst2_125", "sst2-ladder/sst2_4000",
                             "sst2-ladder/sst2_700"]
    studies = read_all(open_quiet(url))
    assert {s.dataset for s in studies} == {"sst2"}
    assert {s.encoder for s in studies} == {"all-MiniLM-L6-v2"}
    shipped = [p for p in builtin_evidence() if p.study == "sst2-ladder"]
    merged = load_evidence(url)
    # The imported copy replaces the built-in points of the same dataset, size and regime.
    assert not any(p.study == "sst2-ladder" for p in merged)
    assert sorted(p.train_size for p in merged if p.study.startswith("sst2-ladder/")) == \
        sorted(p.train_size for p in shipped)


def test_recommend_for_minilm_answers_from_the_ladder_and_cites_it(capsys):
    rec = recommend(700, encoder="all-MiniLM-L6-v2")
    assert rec.regime["encoder"] == "all-minilm-l6-v2"
    ladder = [e for e in rec.evidence if e["study"] == "sst2-ladder"]
    assert ladder and not any(e["discounted"] for e in ladder)
    assert any(n.startswith("built-in study sst2-ladder: SST-2 at a ladder of training sizes")
               for n in rec.notes)
    assert main(["recommend", "--train-size", "700", "--encoder", "all-MiniLM-L6-v2",
                 "--storage", "sqlite:////nonexistent/none.db", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("sst2-ladder" in n for n in out["notes"])


def test_a_sampling_rate_is_never_evidence_for_a_loss_weight_nor_the_reverse():
    """The rate ladder's best rates (8 at small sizes) are another quantity: the default
    (loss-weight) answer is the same with and without them, and says they were left out; the
    rate answer rests on rate evidence alone."""
    from weightsearch.recommender.recommend import recommend_from

    evidence = builtin_evidence()
    loss = [p for p in evidence if p.study != "sst2-rate-ladder"]
    for size in (300, 2500, 20_000):
        with_rate, without = recommend_from(evidence, size), recommend_from(loss, size)
        assert (with_rate.central_weight, with_rate.interval) == \
            (without.central_weight, without.interval)
        assert any(n.startswith("left out: 3 task(s) whose searched weight was a sampling rate")
                   for n in with_rate.notes)
    rate = recommend_from(evidence, 2500, clipping="rate-clip1")
    assert {e["study"] for e in rate.evidence} == {"sst2-rate-ladder"}
    assert any("left out: 14 task(s) whose searched weight was a loss weight" in n
               for n in rate.notes)
