"""Write the release fixture: a study database and an interrupted run folder, made by the code
on PYTHONPATH (a checkout of the release being preserved), with that release's answers.

    PYTHONPATH=<release checkout> python tests/compat/make_fixture.py tests/compat/release-0.1.0

Everything the runs name lives under one fixed root (`ROOT`), because a run's resume check and
a study's spec record absolute paths; the test lays the same root out again before it reads the
fixture. The tiny encoder is not stored: `tiny_encoder.build` makes it again, bit for bit.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from layout import ROOT, STUDY, lay_out, run_config, study_dict  # noqa: E402

# The paper's table, shipped with the release (studies/data/ before the recommender had a
# package of its own).
TABLE2 = next(p for p in (HERE.parents[1] / "recommender" / "data" / "siwlm_table2.csv",
                          HERE.parents[1] / "studies" / "data" / "siwlm_table2.csv")
              if p.is_file())


def answers(url: str) -> dict[str, object]:
    """What the release says about the database: every read-only command's JSON output."""
    from weightsearch.cli import main

    out = {}
    for key, argv in {
        "inspect": ["inspect", "--format", "json"],
        "inspect_study": ["inspect", STUDY, "--format", "json"],
        "recommend": ["recommend", "--train-size", "2490", "--format", "json"],
        "recommend_small": ["recommend", "--train-size", "300", "--task-type", "regression",
                            "--format", "json"],
        "evaluate": ["recommend", "--evaluate", "--format", "json"],
    }.items():
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main([*argv, "--storage", url]) == 0, argv
        out[key] = json.loads(buffer.getvalue())
    return out


def main() -> None:
    target = Path(sys.argv[1])
    lay_out()
    import ray

    from weightsearch.studies.importer import import_file
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec
    from weightsearch.trainer import train

    # A run of two epochs, then cut back to its first: what a killed run leaves behind.
    result = train(run_config(), quiet=True)
    run = ROOT / "run"
    shutil.rmtree(run / "checkpoints" / "epoch-002")
    (run / "result.json").unlink()

    spec = load_study_spec(study_dict())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = launch(spec, progress=False)
    finally:
        ray.shutdown()
    assert summary.finished and summary.failed == 0
    url = spec.storage
    import_file(TABLE2, "siwlm-paper", url)
    expected = {"run_result": result.to_dict(), **answers(url)}

    with sqlite3.connect(ROOT / "studies.db") as db:  # everything into the one file
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copy(ROOT / "studies.db", target / "studies.db")
    shutil.copytree(run, target / "run", ignore=shutil.ignore_patterns("*.tfevents*"))
    (target / "expected.json").write_text(json.dumps(expected, indent=1, default=str))


if __name__ == "__main__":
    main()
