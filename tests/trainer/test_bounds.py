"""Bounds: every setting is checked for finiteness and range up front, and a run whose numbers
stop being finite stops with that reason instead of reporting a meaningless model."""

from __future__ import annotations

import math

import pytest

from tests.helpers import run_config
from weightsearch.cli import main
from weightsearch.core.errors import ConfigError, TrainingDiverged


@pytest.mark.parametrize(("setting", "value", "words"), [
    ("weighting", {"scheme": "siwlm", "central_weight": 1e39},
     "weighting.central_weight: must be a number from 0 to 1000"),
    ("weighting", {"scheme": "siwlm", "central_weight": 9, "aux_weight": 1e308},
     "weighting.aux_weight: must be a number from 0 to 1000"),
    ("weighting", {"scheme": "siwlm", "central_weight": math.nan},
     "weighting.central_weight: must be a number"),
    ("seed", 4294967296, "seed"),
    ("subsample_seed", -1, "subsample_seed"),
])
def test_out_of_range_settings_are_refused_up_front(setting, value, words, sample_data_dir,
                                                    tiny_encoder, tmp_path):
    with pytest.raises(ConfigError) as caught:
        run_config(sample_data_dir, tiny_encoder, tmp_path / "run", **{setting: value})
    assert any(words in p for p in caught.value.problems), caught.value.problems
    assert not (tmp_path / "run").exists()


def test_study_seeds_beyond_what_the_rngs_take_are_refused():
    from weightsearch.sweep.spec import load_study_spec

    with pytest.raises(ConfigError, match=r"seeds\[0\]: expected a whole number from 0 to "
                                          r"2147483647, got 4294967296"):
        load_study_spec({"study": "s", "train": {"tasks": ["rte", "mrpc"]},
                         "seeds": [4294967296]})


@pytest.mark.parametrize("name", ["abc\n", " abc", "a/b", "..", "a b", "ü", ".hidden", ""])
def test_one_definition_of_a_study_name_for_launch_and_import(name, tmp_path, capsys):
    from tests.helpers import TABLE2
    from weightsearch.core.errors import DataError
    from weightsearch.studies.importer import import_file
    from weightsearch.sweep.spec import load_study_spec

    with pytest.raises(ConfigError, match="study"):
        load_study_spec({"study": name, "train": {"tasks": ["rte", "mrpc"]}})
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with pytest.raises(DataError, match="is not a study name"):
        import_file(TABLE2, name, url)
    assert not (tmp_path / "db.sqlite").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "1e9", "soon"])
def test_a_claim_ttl_that_is_no_lease_is_refused(value, monkeypatch):
    from weightsearch.studies.claims import ENV_TTL, claim_ttl

    monkeypatch.setenv(ENV_TTL, value)
    with pytest.raises(ConfigError, match=r"WEIGHTSEARCH_CLAIM_TTL.*from 1 to 86400"):
        claim_ttl()


@pytest.mark.parametrize("port", ["70000", "0", "-1", "http"])
def test_serve_refuses_a_port_that_does_not_exist(port, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["serve", "--port", port])
    assert caught.value.code == 2
    assert "no TCP port; give one from 1 to 65535" in capsys.readouterr().err


@pytest.mark.parametrize("token", [" secret", "secret\n", "sécret", "two words"])
def test_a_token_no_client_could_send_is_refused_at_start(token, monkeypatch, capsys):
    monkeypatch.setenv("WEIGHTSEARCH_TOKEN", token)
    assert main(["serve", "--port", "1"]) == 2
    assert "WEIGHTSEARCH_TOKEN must be printable ASCII" in capsys.readouterr().err


@pytest.mark.slow
def test_a_diverging_run_stops_with_the_reason(sample_data_dir, tiny_encoder, tmp_path,
                                               capsys):
    cfg = run_config(sample_data_dir, tiny_encoder, tmp_path / "run", lr=1e6, log_every=1,
                     weighting={"scheme": "siwlm", "central_weight": 1000})
    from weightsearch.trainer import train

    with pytest.raises(TrainingDiverged, match=r"training diverged: the \w+ loss is nan at "
                                               r"update \d+ .*lower lr or the loss weights"):
        train(cfg, quiet=True)
    assert not (tmp_path / "run" / "result.json").exists()
    # Through the CLI: one message, exit 1, no traceback.
    config = tmp_path / "run.yaml"
    import yaml

    raw = {**yaml.safe_load((tmp_path / "run" / "config.yaml").read_text()),
           "output_dir": str(tmp_path / "again")}
    config.write_text(yaml.safe_dump(raw))
    assert main(["train", "--config", str(config), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "training diverged" in err and "Traceback" not in err
    # Asked to, it trains on regardless and reports what it got.
    off = run_config(sample_data_dir, tiny_encoder, tmp_path / "off", lr=1e6, epochs=1,
                     stop_on_divergence=False,
                     weighting={"scheme": "siwlm", "central_weight": 1000})
    assert train(off, quiet=True).history


def test_a_search_space_too_large_to_list_is_refused_before_anything_lists_it():
    import time

    from weightsearch.sweep.spec import load_study_spec

    train = {"tasks": ["rte", "mrpc"]}
    started = time.process_time()  # CPU time: a loaded machine slows the clock, not the work
    with pytest.raises(ConfigError, match=r"14,000,000,001 values from low to high in steps of "
                                          r"1e-09; at most 10,000"):
        load_study_spec({"study": "s", "train": train, "search": {"space": {
            "weighting.central_weight": {"low": 1, "high": 15, "step": 1e-9}}}})
    grid = {"weighting.central_weight": [round(1 + 0.1 * i, 1) for i in range(100)],
            "lr": [1e-5 * i for i in range(1, 101)], "batch_size": list(range(8, 108))}
    with pytest.raises(ConfigError, match=r"1,000,000 cells .* exceed the cap of 50,000"):
        load_study_spec({"study": "s", "train": train, "central_tasks": ["rte"],
                         "search": {"space": grid}})
    assert time.process_time() - started < 5  # refused by counting, not by listing


def test_a_byte_order_mark_on_a_header_is_named(tmp_path, capsys):
    """A file saved twice with a BOM keeps one after the reader drops the first: 'sentence'
    reads as '\\ufeffsentence', and the message says why the column is not found."""
    glue = tmp_path / "glue" / "SST-2"
    glue.mkdir(parents=True)
    (glue / "train.tsv").write_bytes(("\ufeff\ufeffsentence\tlabel\nfine\t1\n").encode())
    (glue / "dev.tsv").write_text("sentence\tlabel\nfine\t1\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"data_dir: {tmp_path / 'glue'}\ntasks: [sst2]\nepochs: 1\n"
                      f"output_dir: {tmp_path / 'run'}\n")
    assert main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "'sentence' holds a byte-order mark" in err and "Traceback" not in err


@pytest.fixture
def loop(tmp_path):
    """Two symbolic links pointing at each other."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a"


@pytest.mark.parametrize(("setting", "value", "words"), [
    ("num_threads", "100000", "num_threads: 100000 is out of range"),
    ("output_dir", "/proc/weightsearch-x", "output_dir: cannot create folders in /proc"),
    ("cache_dir", "FILE", "cache_dir: FILE is a file, not a folder"),
    ("output_dir", "FILE/x", "output_dir: FILE is a file, so"),
    ("output_dir", "LOOP/x", "is a symbolic link that leads nowhere"),
    ("data_dir", "LOOP", "data_dir: folder"),
    ("encoder", "LOOP", "encoder: folder"),
])
def test_unusable_paths_and_counts_are_field_errors(setting, value, words, loop, tmp_path,
                                                    sample_data_dir, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"data_dir: {sample_data_dir}\ntasks: [rte]\nepochs: 1\n"
                      f"output_dir: {tmp_path / 'run'}\ncache_dir: {tmp_path / 'cache'}\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    value = value.replace("LOOP", str(loop)).replace("FILE", str(a_file))
    words = words.replace("FILE", str(a_file))
    assert main(["train", "--config", str(config), "--set", f"{setting}={value}"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def test_a_launch_with_bad_data_or_a_looping_workdir_writes_nothing(loop, tmp_path,
                                                                   sample_data_dir, capsys):
    import shutil

    from tests.helpers import EXAMPLES

    url = f"sqlite:///{tmp_path / 'new.db'}"
    study = str(EXAMPLES / "study-sample.yaml")
    assert main(["launch", study, "--storage", url, "--set", f"workdir={loop}"]) == 2
    assert "symbolic link that leads nowhere" in capsys.readouterr().err
    data = tmp_path / "glue"
    shutil.copytree(sample_data_dir, data)
    (data / "SST-2" / "train.tsv").write_text("sentence\tlabel\nfine\tmaybe\n")
    assert main(["launch", study, "--storage", url, "--set", f"train.data_dir={data}",
                 "--set", f"workdir={tmp_path / 'runs'}"]) == 2
    assert "label 'maybe'" in capsys.readouterr().err
    assert not (tmp_path / "new.db").exists()  # the storage is not created for a bad input
    assert not (tmp_path / "runs").exists()


@pytest.fixture
def damaged_db(tmp_path):
    """A study database whose pages after the first two are overwritten: SQLite reads its
    schema, then finds the tables' pages malformed."""
    import random

    from tests.helpers import TABLE2
    from weightsearch.studies.importer import import_file

    path = tmp_path / "damaged.db"
    import_file(TABLE2, "paper", f"sqlite:///{path}")
    data = bytearray(path.read_bytes())
    noise = random.Random(7)
    for i in range(8192, len(data)):
        data[i] = noise.randrange(256)
    path.write_bytes(bytes(data))
    return f"sqlite:///{path}"


@pytest.mark.parametrize("argv", [["inspect", "paper"], ["inspect"], ["resume", "paper"],
                                  ["recommend", "--train-size", "3000"],
                                  ["export", "paper", "-o", "OUT"]])
def test_a_damaged_study_database_is_one_message_not_a_traceback(argv, damaged_db, tmp_path,
                                                                 capsys):
    argv = [a.replace("OUT", str(tmp_path / "out.csv")) for a in argv]
    assert main([*argv, "--storage", damaged_db]) == 2
    err = capsys.readouterr().err
    assert "is damaged" in err or "failed" in err, err
    assert "Traceback" not in err and "exceeding max length" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.csv").exists()


def test_the_service_answers_503_for_a_damaged_study_database(damaged_db):
    from fastapi.testclient import TestClient

    from weightsearch.service.app import create_app

    client = TestClient(create_app(damaged_db), raise_server_exceptions=False)
    for path in ("/studies", "/studies/paper", "/recommend?train_size=3000"):
        answer = client.get(path)
        assert answer.status_code == 503, (path, answer.status_code, answer.text)
        assert "study database" in answer.json()["detail"]
    assert client.get("/health").status_code in (200, 503)


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB file system of its own (tmpfs): a disk that fills up for real."""
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command here")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_full_disk_is_said_as_such(small_disk, sample_data_dir, tiny_encoder, tmp_path,
                                     capsys):
    """The tiny encoder's weights (about 4 MB) do not fit: the checkpoint write fails, and the
    run says the disk is full instead of torch's "unexpected pos"."""
    import yaml

    raw = {"encoder": tiny_encoder, "data_dir": str(sample_data_dir), "tasks": ["rte"],
           "epochs": 1, "max_train_examples": 16, "max_eval_examples": 16, "batch_size": 8,
           "output_dir": str(small_disk / "run"), "cache_dir": str(tmp_path / "cache")}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["train", "--config", str(config), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"no space left on the disk of {small_disk / 'run' / 'checkpoints'}" in err, err
    assert "Traceback" not in err and "unexpected pos" not in err
    assert not list((small_disk / "run" / "checkpoints").glob(".epoch-*"))  # no half-write


def test_retries_start_counting_at_the_first_failure_not_the_first_try(monkeypatch):
    """SQLite's busy timeout (120 s) outlasts the retry deadline (90 s): a deadline counted
    from the first try left a locked database no retry at all."""
    import time

    import sqlalchemy.exc

    from weightsearch.studies import retries

    monkeypatch.setattr(retries, "RETRY_DEADLINE_S", 1.0)
    calls = []

    def write():
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(1.2)  # the first try waits out a lock held by another process
            raise sqlalchemy.exc.OperationalError("UPDATE trials", {},
                                                  Exception("server closed the connection"))
        return "written"

    assert retries.call_retrying("tell", write) == "written" and len(calls) == 2


def test_fixed_batches_with_an_epoch_ended_by_one_task_are_refused(sample_data_dir,
                                                                  tiny_encoder, tmp_path):
    with pytest.raises(ConfigError, match=r"batches: fixed cannot be combined with "
                                          r"sampling.epoch_ends_with"):
        run_config(sample_data_dir, tiny_encoder, tmp_path / "run", batches="fixed",
                   sampling={"scheme": "weighted", "weights": {"rte": 0.5},
                             "epoch_ends_with": "rte"})
    assert run_config(sample_data_dir, tiny_encoder, tmp_path / "run", batches="fixed",
                      sampling={"scheme": "weighted", "weights": {"rte": 0.5}}).batches == "fixed"


def test_a_database_that_cannot_be_created_is_not_called_deleted():
    """/proc takes no new files, for root too: the open fails, and is not called a deletion."""
    from weightsearch.core.errors import StorageError
    from weightsearch.studies.storage import open_storage

    with pytest.raises(StorageError) as caught:
        open_storage("sqlite:////proc/weightsearch-new.db")
    assert "deleted" not in str(caught.value)
    assert "cannot open study storage 'sqlite:////proc/weightsearch-new.db'" in str(caught.value)
