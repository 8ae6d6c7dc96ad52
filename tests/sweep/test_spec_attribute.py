"""Where a launched study keeps its study file: a study system attribute, so that Optuna's own
`optuna studies` listing (which prints every user attribute in one column) stays readable;
studies launched before, which hold it as the user attribute `spec`, still read."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from weightsearch.studies import schema as S

# A run template with many settings: the study file is long, the listing must not be.
_TRAIN = {"tasks": ["rte", "mrpc"], "epochs": 2, "lr": 3.0e-5, "batch_size": 8,
          "eval_batch_size": 64, "max_train_examples": 40, "max_eval_examples": 40,
          "max_seq_len": 96, "warmup": 0.1, "weight_decay": 0.01, "grad_clip": 1.0,
          "log_every": 7}


def _spec(data_dir: Path, workdir: Path, **changes):
    from weightsearch.sweep.spec import load_study_spec

    return load_study_spec({"study": "listed", "train": {**_TRAIN, "data_dir": str(data_dir)},
                            "central_tasks": ["rte"], "weights": [1, 9], "seeds": [1, 2],
                            "workdir": str(workdir), **changes})


def _launch(spec, url: str) -> None:
    """What `launch` does to the database before its first trial, without Ray."""
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db

    storage = open_storage(url)
    centrals = [study_db.describe(spec, c) for c in spec.central_tasks]
    existing = study_db.existing_studies(spec, storage, url, centrals)
    study_db.create_studies(spec, storage, url, centrals, existing)


def _optuna_studies(url: str) -> str:
    optuna_cli = Path(sys.executable).with_name("optuna")
    command = [str(optuna_cli)] if optuna_cli.exists() else \
        [sys.executable, "-c", "import sys, optuna.cli; sys.exit(optuna.cli.main())"]
    done = subprocess.run([*command, "studies", "--storage", url], capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout


def test_optuna_studies_does_not_print_the_study_file(tmp_path, sample_data_dir):
    import optuna

    from weightsearch.studies.reading import open_quiet, read_all, read_central

    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = _spec(sample_data_dir, tmp_path / "runs")
    assert len(str(spec.to_dict())) > 700  # what the listing's one column used to hold
    _launch(spec, url)

    listing = _optuna_studies(url)
    rows = [line for line in listing.splitlines() if line.startswith("|")]
    assert len(rows) == 2 and "listed/rte" in rows[1]  # the header and the study
    cells = [c.strip() for c in rows[1].strip("|").split("|")]
    # Every column is short: the user attributes (task, sizes, metric, encoder, digest, ...)
    # are a few hundred characters whatever the study file says; the study file was 1,500.
    assert max(map(len, cells)) < 600, cells
    assert "'spec'" not in listing and str(sample_data_dir) not in listing
    assert "'central_task': 'rte'" in listing  # the short attributes are still listed

    storage = open_quiet(url)
    study = optuna.load_study(study_name="listed/rte", storage=storage)
    assert S.A_SPEC not in study.user_attrs
    assert S.study_attrs(study)[S.A_SPEC] == spec.to_dict()
    # Every reader finds it: resume, inspect (one study, and the service's cache of all).
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    assert load_study_spec(study_db.stored_spec("listed", storage, url)).digest() \
        == spec.digest()
    assert read_central(storage, "listed/rte").epochs == 2
    assert [c.epochs for c in read_all(storage)] == [2]
    _launch(spec, url)  # launched again: the same study, accepted


def _old_style_study(url: str, spec) -> None:
    """A study as releases before this change launched it: the study file a user attribute,
    no grid_cells (inspect then counts the cells from the study file)."""
    import optuna

    from weightsearch.studies.storage import open_storage

    study = optuna.create_study(study_name="listed/rte", storage=open_storage(url),
                                direction="maximize")
    attrs = {S.A_STUDY: "listed", S.A_CENTRAL: "rte", S.A_TASK_TYPE: "classification",
             S.A_TRAIN_SIZE: 40, S.A_PRIMARY: "accuracy", S.A_STAGE: "multitask",
             S.A_DIGEST: spec.digest(), S.A_SPEC: spec.to_dict(), S.A_SOURCE: S.SOURCE_SWEEP,
             S.A_CREATED: dt.datetime.now(dt.timezone.utc).isoformat()}
    for key, value in attrs.items():
        study.set_user_attr(key, value)  # directly through Optuna, the old way


def test_a_study_with_the_study_file_as_a_user_attribute_still_reads(tmp_path,
                                                                     sample_data_dir):
    import optuna

    from weightsearch.studies.reading import open_quiet, read_all, read_central
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep import study_db
    from weightsearch.sweep.spec import load_study_spec

    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = _spec(sample_data_dir, tmp_path / "runs")
    _old_style_study(url, spec)
    storage = open_quiet(url)

    # resume reads it back; inspect reads its epochs and counts its cells from it
    assert load_study_spec(study_db.stored_spec("listed", storage, url)).digest() \
        == spec.digest()
    central = read_central(storage, "listed/rte")
    assert central.epochs == 2 and central.counts["not_started"] == 4  # 2 weights x 2 seeds
    assert [(c.epochs, c.counts["not_started"]) for c in read_all(storage)] == [(2, 4)]
    # launch accepts it as the same study
    _launch(spec, url)

    # A launch that grows it stores the grown file the new way; the old attribute, which
    # Optuna cannot delete, is no longer what is read.
    grown = _spec(sample_data_dir, tmp_path / "runs", seeds=[1, 2, 3])
    _launch(grown, url)
    study = optuna.load_study(study_name="listed/rte", storage=open_storage(url))
    assert study.user_attrs[S.A_SPEC] == spec.to_dict()
    assert S.study_attrs(study)[S.A_SPEC] == grown.to_dict()
    assert load_study_spec(study_db.stored_spec("listed", storage, url)).digest() \
        == grown.digest()
    assert read_central(storage, "listed/rte").counts["not_started"] == 6


@pytest.mark.parametrize(("user", "system", "expected"), [
    ({S.A_SPEC: {"v": "old"}}, {}, {"v": "old"}),
    ({S.A_SPEC: {"v": "old"}}, {S.SYS_SPEC: {"v": "new"}}, {"v": "new"}),
    ({}, {S.SYS_SPEC: {"v": "new"}}, {"v": "new"}),
    ({}, {"study:metric_names": ["accuracy"]}, None),
])
def test_the_system_attribute_wins_over_the_old_user_attribute(user, system, expected):
    assert S.with_stored_spec({"source": "sweep", **user}, system).get(S.A_SPEC) == expected
