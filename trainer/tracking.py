"""Experiment tracking beside the run's own JSONL logs: TensorBoard event files and MLflow runs.

`tracking: {tensorboard: true, mlflow: URI}` in a run config. Both log the same values:
- per update (written when steps.jsonl is flushed, every `log_every` updates, so the losses
  stay on the device in between): `train/loss`, `train/task_loss/<task>`, `train/lr` and
  `train/weight` (the weighting scheme's loss weight), at the global update number;
- per epoch: `eval/<task>/<metric>` for every dev metric and `train/epoch_loss`, at the epoch.
TensorBoard writes to `<output_dir>/tensorboard/` through torch's SummaryWriter (the tensorboard
package must be installed); MLflow logs one run per output folder into the experiment
`mlflow_experiment` (default `weightsearch`) through MlflowClient. Both are optional imports: the
`tracking` extra installs them, and a config that asks for a missing one is refused up front.
A resumed run appends to the same TensorBoard folder (dropping updates after its checkpoint) and
the same MLflow run (its id is kept in `<output_dir>/mlflow_run.json`).

`mlflow_parent: NAME` nests the run under a parent run of that name in the same experiment,
found or created by the first run that names it: a study sets it to its name, so that its
trials are the children of one run per study, as MLflow shows a sweep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from weightsearch.core.errors import ConfigError
from weightsearch.core.fields import setting, unknown_keys

EXTRA = "pip install 'weightsearch[tracking]'"
TENSORBOARD_DIR = "tensorboard"
MLFLOW_RUN = "mlflow_run.json"
_KEYS = ("tensorboard", "mlflow", "mlflow_experiment", "mlflow_parent")
_PARENT_TAG = "weightsearch.parent"
_PARENT_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._/ -]{0,249}")
# Where MLflow's client can keep runs: a file store, a tracking server, a SQL database (with an
# optional driver, e.g. postgresql+psycopg) or Databricks. Checked up front: a study would
# otherwise fail every trial on a URI such as ftp://host.
MLFLOW_SCHEMES = ("file", "http", "https", "sqlite", "postgresql", "mysql", "mssql",
                  "databricks", "databricks-uc", "uc")


@dataclass(frozen=True)
class TrackingSettings:
    tensorboard: bool = setting(
        False, doc="write TensorBoard event files to output_dir/tensorboard/: true, false "
                   "(needs the tracking extra)")
    mlflow: str | None = setting(
        None, doc="log to MLflow: a tracking URI (file:///path/to/mlruns, sqlite:///mlflow.db, "
                  "http://host:5000) or a folder (a file store); null: no MLflow")
    mlflow_experiment: str = setting("weightsearch",
                                     doc="the MLflow experiment the run is logged in")
    mlflow_parent: str | None = setting(
        None, since="0.2.0",
        doc="nest the MLflow run under the parent run of this name in the same experiment, "
            "found or created (a study sets its own name); null: no parent")

    @property
    def enabled(self) -> bool:
        return self.tensorboard or self.mlflow is not None


def parse_tracking(raw: Any, problems: list[str], base: Path | None = None) -> TrackingSettings:
    """`tracking: {tensorboard: bool, mlflow: URI or folder, mlflow_experiment: name}`. A folder
    path becomes a file:// URI, relative to `base` (the config file's folder) or else the
    working directory."""
    if raw is None:
        return TrackingSettings()
    if not isinstance(raw, Mapping):
        problems.append(f"tracking: expected a mapping such as {{tensorboard: true, mlflow: "
                        f"file:///path/to/mlruns}}, got {raw!r}")
        return TrackingSettings()
    before = len(problems)
    unknown_keys(raw, _KEYS, problems, "tracking.")
    tensorboard = raw.get("tensorboard", False)
    if not isinstance(tensorboard, bool):
        problems.append(f"tracking.tensorboard: expected true or false, got {tensorboard!r}")
    elif tensorboard and importlib.util.find_spec("tensorboard") is None:
        problems.append(f"tracking.tensorboard: needs the tensorboard package; {EXTRA}")
    mlflow = raw.get("mlflow")
    if mlflow is not None:
        if not isinstance(mlflow, str) or not mlflow.strip():
            problems.append(f"tracking.mlflow: expected a tracking URI (file:///path/to/mlruns, "
                            f"sqlite:///mlflow.db, http://host:5000), got {mlflow!r}")
        else:
            mlflow = _as_uri(mlflow.strip(), base)
            scheme = urlsplit(mlflow).scheme.partition("+")[0]
            if scheme not in MLFLOW_SCHEMES:
                problems.append(f"tracking.mlflow: MLflow cannot store runs at {mlflow!r}; give "
                                f"a folder or a URI with one of the schemes "
                                f"{', '.join(MLFLOW_SCHEMES)}")
            elif importlib.util.find_spec("mlflow") is None:
                problems.append(f"tracking.mlflow: needs MLflow's client; {EXTRA}")
    experiment = raw.get("mlflow_experiment", "weightsearch")
    if not isinstance(experiment, str) or not experiment.strip():
        problems.append(f"tracking.mlflow_experiment: expected a name, got {experiment!r}")
    parent = raw.get("mlflow_parent")
    if parent is not None and not (isinstance(parent, str) and _PARENT_NAME.fullmatch(parent)):
        problems.append(f"tracking.mlflow_parent: expected a run name of letters, digits and "
                        f"- _ . / (up to 250), got {parent!r}")
    if len(problems) > before:
        return TrackingSettings()
    return TrackingSettings(tensorboard=tensorboard, mlflow=mlflow, mlflow_experiment=experiment,
                            mlflow_parent=parent)


def _as_uri(value: str, base: Path | None) -> str:
    """A URI as given; a plain path as a file:// URI of its absolute form."""
    scheme = urlsplit(value).scheme
    if len(scheme) > 1:  # one letter would be a Windows drive
        return value
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    return Path(os.path.normpath(path)).as_uri()


class Tracker:
    """Where a run's numbers go besides its JSONL logs; this base class drops them."""

    def steps(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Rows of steps.jsonl (global_step, task, loss, lr, weight, ...), when they are
        flushed."""

    def epoch(self, epoch: int, metrics: Mapping[str, Mapping[str, float]],
              train_loss: float) -> None:
        """After each epoch's evaluation."""

    def close(self) -> None:
        """When the run has finished."""


def open_tracker(settings: TrackingSettings, output_dir: Path, stage: str,
                 params: Mapping[str, Any], resumed_at: int | None = None) -> Tracker:
    """The trackers the settings ask for. resumed_at: the global step a resumed run continues
    from (later updates of the interrupted attempt are dropped)."""
    trackers: list[Tracker] = []
    if settings.tensorboard:
        trackers.append(_TensorBoard(output_dir / TENSORBOARD_DIR, resumed_at))
    if settings.mlflow is not None:
        trackers.append(_MLflow(settings, output_dir, stage, params))
    if len(trackers) == 1:
        return trackers[0]
    return _All(trackers) if trackers else Tracker()


class _All(Tracker):
    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    def steps(self, rows: Sequence[Mapping[str, Any]]) -> None:
        for t in self.trackers:
            t.steps(rows)

    def epoch(self, epoch: int, metrics: Mapping[str, Mapping[str, float]],
              train_loss: float) -> None:
        for t in self.trackers:
            t.epoch(epoch, metrics, train_loss)

    def close(self) -> None:
        for t in self.trackers:
            t.close()


def _step_values(row: Mapping[str, Any]) -> dict[str, float]:
    values = {"train/loss": row["loss"], f"train/task_loss/{row['task']}": row["loss"],
              "train/lr": row["lr"], "train/weight": row["weight"]}
    if row.get("grad_norm") is not None:  # not for a skipped (weight 0) batch
        values.update({"train/grad_norm": row["grad_norm"],
                       f"train/grad_norm_unweighted/{row['task']}": row["grad_norm_unweighted"],
                       "train/clip_scale": row["clip_scale"],
                       f"train/clipped/{row['task']}": float(row["clipped"])})
    return values


def _epoch_values(metrics: Mapping[str, Mapping[str, float]],
                  train_loss: float) -> dict[str, float]:
    values = {f"eval/{task}/{name}": float(v)
              for task, row in metrics.items() for name, v in row.items()}
    return {**values, "train/epoch_loss": train_loss}


class _TensorBoard(Tracker):
    def __init__(self, folder: Path, resumed_at: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step hides what an interrupted attempt logged after the checkpoint.
        self.writer = SummaryWriter(str(folder), purge_step=resumed_at)

    def steps(self, rows: Sequence[Mapping[str, Any]]) -> None:
        for row in rows:
            for tag, value in _step_values(row).items():
                self.writer.add_scalar(tag, value, row["global_step"])

    def epoch(self, epoch: int, metrics: Mapping[str, Mapping[str, float]],
              train_loss: float) -> None:
        for tag, value in _epoch_values(metrics, train_loss).items():
            self.writer.add_scalar(tag, value, epoch)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _MLflow(Tracker):
    BATCH = 1000  # MLflow's limit of metrics per log_batch call

    def __init__(self, settings: TrackingSettings, output_dir: Path, stage: str,
                 params: Mapping[str, Any]) -> None:
        self.uri = str(settings.mlflow)
        if urlsplit(self.uri).scheme == "file":
            # MLflow 3 keeps its file store only on request; the config requested it by URI.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        record = output_dir / MLFLOW_RUN
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
            resumed = _resumable_run(record, self.uri)
            if resumed is not None:
                self.run_id = resumed
                self.client.update_run(self.run_id, status="RUNNING")
            else:
                with _creation_lock(self.uri):
                    experiment = _experiment_id(self.client, settings.mlflow_experiment)
                    parent = None if settings.mlflow_parent is None else \
                        _parent_run(self.client, experiment, settings.mlflow_parent)
                name = _run_name(output_dir, stage, settings, params)
                tags = {"weightsearch.stage": stage, "weightsearch.output_dir": str(output_dir)}
                if parent is not None:
                    tags["mlflow.parentRunId"] = parent
                run = self.client.create_run(experiment, run_name=name, tags=tags)
                self.run_id = run.info.run_id
                self.client.log_batch(self.run_id, params=[
                    Param(k, str(v)[:6000]) for k, v in params.items()])
                record.write_text(json.dumps({"tracking_uri": self.uri,
                                              "run_id": self.run_id}))
        except MlflowException as exc:
            raise ConfigError([f"tracking.mlflow: {self.uri}: {exc.message}"]) from None
        self.failed = False

    def _log(self, values: list[tuple[str, float, int]]) -> None:
        if self.failed:
            return
        from mlflow.entities import Metric
        from mlflow.exceptions import MlflowException

        stamp = int(time.time() * 1000)
        metrics = [Metric(key, float(value), stamp, step) for key, value, step in values]
        try:
            for i in range(0, len(metrics), self.BATCH):
                self.client.log_batch(self.run_id, metrics=metrics[i:i + self.BATCH])
        except Exception as exc:  # a tracking hiccup must not end an hour of training
            self.failed = True
            message = exc.message if isinstance(exc, MlflowException) else str(exc)
            print(f"tracking.mlflow: logging to {self.uri} failed, MLflow logging stops for "
                  f"this run: {message}", file=sys.stderr)

    def steps(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self._log([(tag, value, row["global_step"])
                   for row in rows for tag, value in _step_values(row).items()])

    def epoch(self, epoch: int, metrics: Mapping[str, Mapping[str, float]],
              train_loss: float) -> None:
        self._log([(tag, value, epoch)
                   for tag, value in _epoch_values(metrics, train_loss).items()])

    def close(self) -> None:
        if not self.failed:
            self.client.set_terminated(self.run_id, "FINISHED")


def _resumable_run(record: Path, uri: str) -> str | None:
    """The MLflow run an earlier attempt of this output folder logged to, if the same URI."""
    try:
        saved = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    return saved.get("run_id") if saved.get("tracking_uri") == uri else None


@contextlib.contextmanager
def _creation_lock(uri: str):
    """One process at a time looks up or creates the experiment of a file store: MLflow's file
    store checks a new experiment's name without a lock, so trials starting together in
    separate workers made two experiments of one name. Servers and databases need none."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        yield
        return
    import fcntl

    root = Path(unquote(parts.path))
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".weightsearch-experiment.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _experiment_id(client: Any, name: str) -> str:
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except MlflowException:  # another trial created it meanwhile
        return client.get_experiment_by_name(name).experiment_id


def _parent_run(client: Any, experiment: str, name: str) -> str:
    """The id of the parent run `name`, created when none exists. Without a file lock (servers,
    databases) two trials may create one each: both then keep the older one, and the newer
    one's creator deletes it; a run searching in between saw only the older one."""
    def found() -> list[Any]:
        runs = client.search_runs([experiment], f"tags.`{_PARENT_TAG}` = '{name}'",
                                  max_results=50)
        return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))

    existing = found()
    if existing:
        return existing[0].info.run_id
    run = client.create_run(experiment, run_name=name, tags={_PARENT_TAG: name})
    client.set_terminated(run.info.run_id, "FINISHED")  # a container: it trains nothing itself
    oldest = found()[0].info.run_id
    if oldest != run.info.run_id:
        client.delete_run(run.info.run_id)
    return oldest


def _run_name(output_dir: Path, stage: str, settings: TrackingSettings,
              params: Mapping[str, Any]) -> str:
    """The MLflow run's name: its folder's; a fine-tuning run's with the parent run's folder and
    its stage; under a parent (a study's cells) led by the central task, since cells of
    different central tasks share folder names (`w9_s1`)."""
    name = output_dir.name if stage == "multitask" else \
        f"{output_dir.parents[1].name}-{stage}-{output_dir.name}"
    central = params.get("central_task")
    if settings.mlflow_parent is not None and central and not name.startswith(f"{central}-"):
        return f"{central}-{name}"
    return name


def run_params(cfg: Any) -> dict[str, Any]:
    """The settings worth comparing runs by, as MLflow params."""
    weighting = cfg.weighting
    out = {"tasks": ",".join(cfg.task_names), "central_task": cfg.central_task,
           "encoder": cfg.encoder, "epochs": cfg.epochs, "batch_size": cfg.batch_size,
           "lr": cfg.learning_rate, "optimizer": cfg.optimizer, "seed": cfg.seed}
    if dataclasses.is_dataclass(weighting) and not isinstance(weighting, type):
        out.update({f"weighting.{k}": v for k, v in dataclasses.asdict(weighting).items()})
    return out
