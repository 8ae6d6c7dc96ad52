"""Launch or resume a study: validate, plan the pending cells, run them on Ray, summarize.

Order matters for "bad input leaves the database unchanged": the spec, the storage URL, the
data files and the Ray address are all checked before the first write, and the studies are
created only once Ray is up with the resources the trials ask for.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import socket
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studies import schema as S
from studies.storage import default_storage_url, open_storage
from sweep.claims import Claims
from sweep.spec import GridSearch, StudySpec, load_study_spec
from weightsearch.errors import ClusterError, ConfigError, StorageError

_CONNECT_TIMEOUT_S = 5.0


@dataclass
class CentralResult:
    central: str
    primary_metric: str
    complete: int
    best_weight: float | None
    best_value: float | None


@dataclass
class SweepSummary:
    study: str
    storage_url: str
    ran: int  # trials started by this call
    complete: int  # cells with a finished (COMPLETE or PRUNED) trial, all launches together
    total: int  # cells of the study
    failed: int  # trials of this call that ended FAIL
    centrals: list[CentralResult] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.complete >= self.total

    def lines(self) -> list[str]:
        out = [f"study {self.study}: {self.complete}/{self.total} cells done "
               f"({self.ran} trained now, {self.failed} failed)"]
        for c in self.centrals:
            if c.best_weight is None:
                out.append(f"  {c.central}: no finished trial yet")
            else:
                out.append(f"  {c.central}: best central weight {c.best_weight:g} "
                           f"({c.primary_metric} {c.best_value:.4f}, {c.complete} trials)")
        return out


@dataclass
class _Central:
    """Everything the driver knows about one central task before touching the database."""

    name: str
    cfg: Any  # trainer RunConfig
    sizes: dict[str, int]
    attrs: dict[str, Any]


def launch(
    spec: StudySpec,
    storage_url: str | None = None,
    ray_address: str | None = None,
    progress: bool = True,
) -> SweepSummary:
    """Run every pending cell of `spec`; cells already finished in the database are skipped."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage_url or spec.storage or default_storage_url()
    storage = _open(url)
    if ray_address:
        check_ray_address(ray_address)
    centrals = [_describe(spec, c) for c in spec.central_tasks]
    existing = _existing_studies(spec, storage, url, centrals)
    pending = {c.name: _pending(spec, existing.get(c.name)) for c in centrals}
    total_pending = sum(_count(p) for p in pending.values())
    if total_pending == 0:
        return _summary(spec, storage, url, centrals, ran=0, failed=0)

    started_ray = _start_ray(ray_address)
    try:
        concurrency = _concurrency(spec, total_pending)
        studies = {c.name: _create_study(spec, storage, c, existing.get(c.name)) for c in centrals}
        warm = _warm_starts(spec, centrals, url)
        epochs = max(c.cfg.epochs for c in centrals)
        claims = Claims(storage.engine)
        claims.start()
        ran = failed = 0
        try:
            while True:  # rounds: cells other drivers hold are retried once their leases end
                plans = [_plan(spec, c, studies[c.name], warm[c.name]) for c in centrals]
                total = sum(p.remaining for p in plans)
                if not total:
                    break
                n_ran, n_failed = _run(spec, plans, total, concurrency, epochs, progress, claims)
                ran, failed = ran + n_ran, failed + n_failed
                if not any(p.deferred for p in plans) or (n_failed and not n_ran - n_failed):
                    break  # nothing held elsewhere (or only failures here): report
                time.sleep(min(5.0, claims.ttl / 4))
        finally:
            claims.stop()
        return _summary(spec, storage, url, centrals, ran=ran, failed=failed)
    finally:
        if started_ray:
            import ray

            ray.shutdown()


def resume(
    study_name: str,
    storage_url: str | None = None,
    ray_address: str | None = None,
    progress: bool = True,
) -> SweepSummary:
    """Continue study `study_name` with the configuration stored in the database."""
    url = storage_url or default_storage_url()
    storage = _open(url)
    stored = stored_spec(study_name, storage, url)
    spec = load_study_spec(stored)
    return launch(spec, storage_url=url, ray_address=ray_address, progress=progress)


def _open(url: str) -> Any:
    with warnings.catch_warnings():  # heartbeats are an "experimental" Optuna feature
        warnings.simplefilter("ignore", category=Warning)
        return open_storage(url)


def stored_spec(study_name: str, storage: Any, url: str) -> dict[str, Any]:
    import optuna

    names = [n for n in optuna.get_all_study_names(storage)
             if S.split_study_name(n)[0] == study_name]
    if not names:
        raise StorageError(
            f"no study named {study_name!r} in {url}; `weightsearch inspect --storage {url}` "
            "lists the studies"
        )
    for name in sorted(names):
        attrs = optuna.load_study(study_name=name, storage=storage).user_attrs
        if isinstance(attrs.get(S.A_SPEC), dict):
            return attrs[S.A_SPEC]
    raise StorageError(
        f"study {study_name!r} in {url} holds no study file (it was imported, not launched), "
        "so there is nothing to resume; launch a study file instead"
    )


def check_ray_address(address: str) -> None:
    """Fail in seconds on an address nothing listens on; Ray itself would retry for minutes."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port_text = hostport.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ClusterError(
            f"--ray-address {address!r} is not host:port; give the head node's address, "
            "e.g. 10.0.0.5:6379 (or ray://10.0.0.5:10001 for Ray Client)"
        )
    try:
        with socket.create_connection((host, int(port_text)), timeout=_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ClusterError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one there with "
            f"`ray start --head --port={port_text}`, check the host and port, or leave out "
            "--ray-address to run on this machine"
        ) from None


# --- planning ---------------------------------------------------------------------------
def _describe(spec: StudySpec, central: str) -> _Central:
    """The central task's run config and sizes (reads the train files: DataError surfaces here)."""
    import trainer

    probe = spec.run_mapping(central, S.WEIGHT_LOW, spec.seeds[0], str(spec.workdir))
    try:
        cfg = trainer.load_config(probe)
    except ConfigError as exc:
        raise ConfigError([f"train.{p}" for p in exc.problems]) from None
    sizes = trainer.task_sizes(cfg)
    aux = [t for t in cfg.task_names if t != central]
    spec_task = cfg.task(central)
    metric = spec.objective.metric
    metric = spec_task.primary_metric if metric == "primary" else metric
    if metric not in spec_task.metrics:
        raise ConfigError([f"objective.metric: {central} has no metric {metric!r}; use primary "
                           f"or one of {', '.join(spec_task.metrics)}"])
    attrs = {
        S.A_STUDY: spec.study,
        S.A_CENTRAL: central,
        S.A_TASK_TYPE: cfg.task(central).type,
        S.A_TRAIN_SIZE: sizes[central],
        S.A_AUX_TASKS: aux,
        S.A_AUX_SIZES: {t: sizes[t] for t in aux},
        S.A_PRIMARY: metric,
        S.A_STAGE: spec.objective.stage,
        S.A_ENCODER: cfg.encoder,
        S.A_VARIANT: getattr(cfg.weighting, "variant", None),
        S.A_DIGEST: spec.digest(),
        S.A_SPEC: spec.to_dict(),
        S.A_SOURCE: S.SOURCE_SWEEP,
    }
    return _Central(central, cfg, sizes, attrs)


def _existing_studies(spec: StudySpec, storage: Any, url: str, centrals: list[_Central]) -> dict:
    """The studies that already exist; one launched with another configuration is an error."""
    import optuna

    names = set(optuna.get_all_study_names(storage))
    found, problems = {}, []
    for c in centrals:
        name = S.study_name(spec.study, c.name)
        if name not in names:
            continue
        study = optuna.load_study(study_name=name, storage=storage)
        attrs = _settled_attrs(study)
        if attrs is None:
            problems.append(f"study {name!r} in {url} holds no weightsearch settings: another "
                            "launch is still creating it (run the command again in a moment to "
                            "join it), or another tool made it (choose another study name)")
        elif attrs.get(S.A_SOURCE) != S.SOURCE_SWEEP:
            problems.append(f"study {name!r} in {url} was imported, not launched; "
                            "choose another study name")
        elif attrs.get(S.A_DIGEST) != spec.digest():
            old = attrs.get(S.A_SPEC) or {}
            new = spec.to_dict()
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            problems.append(
                f"study {name!r} in {url} was launched with a different configuration "
                f"(changed: {', '.join(changed) or 'unknown'}); choose another study name, or "
                f"`weightsearch resume {spec.study} --storage {url}` to continue it as it was"
            )
        else:
            found[c.name] = study
    if problems:
        raise ConfigError(problems)
    return found


def _settled_attrs(study: Any, wait_s: float = 15.0) -> dict[str, Any] | None:
    """The study's user attributes once its creator has written them; a launch that created
    the study a moment ago writes them one by one (the creation time last)."""
    deadline = time.monotonic() + wait_s
    while True:
        attrs = study.user_attrs
        if S.A_CREATED in attrs or attrs.get(S.A_SOURCE) not in (None, S.SOURCE_SWEEP):
            return attrs
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def _done_cells(study: Any) -> tuple[set[str], dict[int, int], dict[str, int]]:
    """Finished cells, finished trials per seed, and all earlier trials per cell."""
    from optuna.trial import TrialState

    done: set[str] = set()
    per_seed: dict[int, int] = {}
    attempts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        cell = t.user_attrs.get(S.T_CELL)
        if cell is None:
            continue
        attempts[cell] = attempts.get(cell, 0) + 1
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            done.add(cell)
            seed = t.user_attrs.get(S.T_SEED)
            per_seed[seed] = per_seed.get(seed, 0) + 1
    return done, per_seed, attempts


def _pending(spec: StudySpec, study: Any) -> Any:
    done, per_seed, _ = _done_cells(study) if study is not None else (set(), {}, {})
    if isinstance(spec.search, GridSearch):
        return [(w, s) for s in spec.seeds for w in spec.search.weights
                if S.cell_key(w, s) not in done]
    return {s: max(0, spec.search.n_trials - per_seed.get(s, 0)) for s in spec.seeds}


def _count(pending: Any) -> int:
    return len(pending) if isinstance(pending, list) else sum(pending.values())


def _create_study(spec: StudySpec, storage: Any, central: _Central, existing: Any) -> Any:
    import optuna

    if existing is None:
        study = optuna.create_study(
            study_name=S.study_name(spec.study, central.name), storage=storage,
            direction="maximize", load_if_exists=True,
        )
        for key, value in central.attrs.items():
            study.set_user_attr(key, value)
        # Last: its presence tells a concurrent launch that the study's settings are complete.
        if S.A_CREATED not in study.user_attrs:
            study.set_user_attr(S.A_CREATED, dt.datetime.now(dt.timezone.utc).isoformat())
    else:
        study = existing
    sampler: Any
    if isinstance(spec.search, GridSearch):
        sampler = optuna.samplers.RandomSampler()  # unused: grid trials have fixed weights
    elif spec.search.sampler == "tpe":
        # constant_liar: trials still running count as bad guesses, so parallel proposals spread.
        sampler = optuna.samplers.TPESampler(seed=spec.seeds[0], constant_liar=True)
    else:
        sampler = optuna.samplers.RandomSampler(seed=spec.seeds[0])
    return optuna.load_study(study_name=study.study_name, storage=storage, sampler=sampler)


def _warm_starts(spec: StudySpec, centrals: list[_Central], url: str) -> dict[str, list[float]]:
    """Weights each guided search tries first: the spec's list, or the recommender's answer
    for the central task's training-set size (from the finished studies and the paper's prior)."""
    if not spec.warm_recommend:  # the spec allows `recommend` for guided searches only
        return {c.name: list(spec.warm_start) for c in centrals}
    from studies.recommend import recommend

    out = {}
    for c in centrals:
        weight = recommend(c.attrs[S.A_TRAIN_SIZE], c.attrs[S.A_TASK_TYPE], url).central_weight
        if spec.search.step:  # onto the search's grid, so the sampler can propose it too
            low, step = spec.search.low, spec.search.step
            weight = low + round((weight - low) / step) * step
        out[c.name] = [min(spec.search.high, max(spec.search.low, float(weight)))]
    return out


def _plan(spec: StudySpec, central: _Central, study: Any, warm: list[float]) -> Any:
    """Every unit of the study not finished yet; which of them this driver trains is decided
    unit by unit, by claims in the database, while it runs."""
    from optuna.distributions import FloatDistribution

    from sweep.searcher import CentralPlan, Unit, guided_distribution, slot_key

    _, per_seed, _ = _done_cells(study)
    plan = CentralPlan(
        central=central.name, study=study, primary_metric=central.attrs[S.A_PRIMARY],
        stage=central.attrs[S.A_STAGE],
        distribution=FloatDistribution(S.WEIGHT_LOW, S.WEIGHT_HIGH),
    )
    if isinstance(spec.search, GridSearch):
        plan.units = deque(Unit(S.cell_key(w, s), s, w) for w, s in _pending(spec, study))
    else:
        plan.distribution = guided_distribution(spec.search)
        slots = {_slot_of(t) for t in study.get_trials(deepcopy=False)
                 if t.state.name in ("COMPLETE", "PRUNED")}
        plan.units = deque(
            Unit(slot_key(s, i), s, None) for s in spec.seeds
            for i in range(spec.search.n_trials) if slot_key(s, i) not in slots
        )
        # Finished trials without a slot label (older studies) fill the first slots of a seed.
        for seed, n in per_seed.items():
            legacy = n - sum(1 for k in slots if k and k.startswith(f"slot:{seed}:"))
            for i in range(max(0, legacy)):
                if Unit(slot_key(seed, i), seed, None) in plan.units:
                    plan.units.remove(Unit(slot_key(seed, i), seed, None))
        plan.warm = {s: list(warm) for s in spec.seeds}
    return plan


def _slot_of(trial: Any) -> str | None:
    return trial.user_attrs.get(S.T_SLOT)


# --- Ray ---------------------------------------------------------------------------------
def _start_ray(address: str | None) -> bool:
    """Join `address`, or start a local Ray; returns whether this call started it."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no CSV/TensorBoard files
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "logging_level": "ERROR"}
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            # "local" always starts a fresh instance: a bare init() would silently join any
            # cluster that `ray start` left running on this machine.
            ray.init(address="local", num_cpus=os.cpu_count() or 1, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "this machine"
        raise ClusterError(
            f"cannot start or join Ray at {where}: {str(exc).splitlines()[0]}; "
            "check `ray status` there, or leave out --ray-address to run locally"
        ) from None
    return True


def _concurrency(spec: StudySpec, pending: int) -> int:
    """max_concurrent, or as many trials as the cluster's CPUs and GPUs fit at once."""
    import ray

    available = ray.cluster_resources()
    cpus, gpus = available.get("CPU", 0.0), available.get("GPU", 0.0)
    if spec.resources.gpu > 0 and gpus < spec.resources.gpu:
        raise ClusterError(
            f"resources.gpu: each trial asks for {spec.resources.gpu:g} GPU but the Ray "
            f"cluster has {gpus:g}; set resources.gpu: 0 to train on CPUs, or join a cluster "
            "with GPUs (--ray-address)"
        )
    if cpus < spec.resources.cpu:
        raise ClusterError(
            f"resources.cpu: each trial asks for {spec.resources.cpu:g} CPUs but the Ray "
            f"cluster has {cpus:g}; lower resources.cpu"
        )
    fit = math.floor(cpus / spec.resources.cpu + 1e-9)
    if spec.resources.gpu > 0:
        fit = min(fit, math.floor(gpus / spec.resources.gpu + 1e-9))
    limit = spec.max_concurrent or fit
    return max(1, min(limit, pending))


def _run(spec: StudySpec, plans: list, total: int, concurrency: int, epochs: int,
         progress: bool, claims: Claims) -> tuple[int, int]:
    """Run at most `total` trials through Tune; returns how many this driver ran and how many
    of them ended FAIL."""
    from ray import tune

    from sweep.progress import Progress
    from sweep.searcher import CellSearcher
    from sweep.trainable import run_cell

    stopped: set[str] = set()
    meter = Progress(spec.study, total, concurrency, enabled=progress)
    searcher = CellSearcher(plans, epochs, meter, stopped, claims)
    trainable = tune.with_resources(
        tune.with_parameters(run_cell, spec=spec),
        {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu},
    )
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=_scheduler(spec, epochs, stopped),
            num_samples=total,
            max_concurrent_trials=concurrency,
            # A worker that already imported torch and transformers takes the next cell:
            # those imports and the worker start cost more than a small trial's training.
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            storage_path=str(Path(spec.workdir) / "ray"),
            name=f"{spec.study}-{stamp}",
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            verbose=0,
            callbacks=[_trial_index(searcher)],
        ),
    )
    try:
        tuner.fit()
    finally:
        # Ctrl-C, or Tune gave up: no trial of ours stays RUNNING.
        interrupted = searcher.abandon_live()
    if interrupted:  # Tune catches Ctrl-C itself and returns with trials still running
        raise KeyboardInterrupt
    return sum(meter.counts.values()), meter.counts.get("FAIL", 0)


def _scheduler(spec: StudySpec, epochs: int, stopped: set[str]) -> Any:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

    from sweep.trainable import EPOCH, OBJECTIVE

    if spec.scheduler.name != "asha":
        return FIFOScheduler()

    class RecordingASHA(ASHAScheduler):
        """ASHA that remembers whom it stopped, so the searcher can tell PRUNED from FAIL."""

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            decision = super().on_trial_result(tune_controller, trial, result)
            if decision == TrialScheduler.STOP:
                stopped.add(trial.trial_id)
            return decision

    # max_t one past the last epoch: ASHA stops a trial at max_t, which would cut off the
    # trainable's final summary report that follows the last epoch.
    return RecordingASHA(
        metric=OBJECTIVE, mode="max", time_attr=EPOCH, max_t=epochs + 1,
        grace_period=min(spec.scheduler.grace_period, epochs),
        reduction_factor=spec.scheduler.reduction_factor,
    )


def _trial_index(searcher: Any) -> Any:
    from ray.tune import Callback

    class TrialIndex(Callback):
        """Hands the searcher Tune's trial objects, whose error files name a failure's cause."""

        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            searcher.tune_trials[trial.trial_id] = trial

    return TrialIndex()


def _summary(spec: StudySpec, storage: Any, url: str, centrals: list[_Central], ran: int,
             failed: int) -> SweepSummary:
    import optuna
    from optuna.trial import TrialState

    per_central = len(spec.seeds) * (
        len(spec.search.weights) if isinstance(spec.search, GridSearch) else spec.search.n_trials
    )
    summary = SweepSummary(spec.study, url, ran=ran, complete=0,
                           total=per_central * len(centrals), failed=failed)
    names = set(optuna.get_all_study_names(storage))
    for c in centrals:
        name = S.study_name(spec.study, c.name)
        metric = c.attrs[S.A_PRIMARY]
        if name not in names:
            summary.centrals.append(CentralResult(c.name, metric, 0, None, None))
            continue
        study = optuna.load_study(study_name=name, storage=storage)
        done, _, _ = _done_cells(study)
        summary.complete += len(done)
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if complete:
            best = max(complete, key=lambda t: t.value)
            summary.centrals.append(CentralResult(c.name, metric, len(complete),
                                                  best.params[S.PARAM], best.value))
        else:
            summary.centrals.append(CentralResult(c.name, metric, 0, None, None))
    return summary
