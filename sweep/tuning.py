"""The Ray side of a sweep: start or join Ray, size the concurrency, run one round of trials
through Tune.

Tune keeps its own result files for every trial (`result.json`, `progress.csv`, TensorBoard
events, `params.json`) under `<workdir>/ray/<experiment>/`, one experiment folder per driver
and round, so Ray's `ExperimentAnalysis` and TensorBoard read a study (a fused trial's files
hold its cells' rows one after another, each tagged with its `member`).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

from weightsearch.core.errors import ClusterError
from weightsearch.studies.claims import Claims
from weightsearch.sweep.progress import Progress, say
from weightsearch.sweep.ray_watch import RayWatch
from weightsearch.sweep.spec import StudySpec

_CONNECT_TIMEOUT_S = 5.0


def check_ray_address(address: str) -> None:
    """Fail in seconds on an address nothing listens on; Ray itself would retry for minutes."""
    if address in ("auto", "local"):
        return
    if address.strip().lower().startswith("ray://"):
        raise _ray_client_refused(f"--ray-address {address!r}")
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port_text = hostport.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ClusterError(
            f"--ray-address {address!r} is not host:port; give the head node's address, "
            "e.g. 10.0.0.5:6379"
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


def _ray_client_refused(what: str) -> ClusterError:
    # Under Ray Client, Tune runs the whole experiment, this study's searcher included, on
    # the cluster from a pickled copy: the searcher's database connection and claims stay here.
    return ClusterError(
        f"{what} is a Ray Client address, which a study cannot run through "
        "(its searcher must stay in this process, beside the study database); run the "
        "command on a machine inside the cluster's network with the head's address, e.g. "
        "--ray-address 10.0.0.5:6379"
    )


def _through_ray_client() -> bool:
    from ray.util.client import ray as client

    return client.is_connected()


def start_ray(address: str | None, verbose: bool = True) -> bool:
    """Join `address`, or start a local Ray; returns whether this call started it."""
    import ray

    if ray.is_initialized():
        if _through_ray_client():  # joined before this call (the Python API)
            raise _ray_client_refused("the Ray this process joined")
        return False
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "logging_level": "ERROR"}
    started = time.monotonic()
    say(f"joining the Ray cluster at {address} ..." if address else
        f"starting Ray on this machine ({os.cpu_count() or 1} CPUs) ...", verbose)
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
    if _through_ray_client():  # `auto` took a ray:// address from RAY_ADDRESS
        ray.shutdown()
        raise _ray_client_refused(f"RAY_ADDRESS {os.environ.get('RAY_ADDRESS')!r} (read by "
                                  f"--ray-address {address})")
    res = ray.cluster_resources()
    say(f"Ray ready in {time.monotonic() - started:.0f}s: {res.get('CPU', 0):g} CPUs, "
        f"{res.get('GPU', 0):g} GPUs", verbose)
    return True


def concurrency(spec: StudySpec, pending: int) -> int:
    """max_concurrent, or as many trials as the cluster's CPUs and GPUs fit at once (with
    `gpu: auto`, as its CPUs fit: the share of a GPU is known only once a trial measured it,
    and `GpuGate` keeps to what the GPUs hold at the current share)."""
    import ray

    available = ray.cluster_resources()
    cpus, gpus = available.get("CPU", 0.0), available.get("GPU", 0.0)
    gpu = 0.0 if spec.resources.auto_gpu else float(spec.resources.gpu)  # auto: sized once measured
    if spec.resources.auto_gpu and gpus < 1:
        raise ClusterError(
            f"resources.gpu: auto gives a study's first trial a whole GPU, to measure the "
            f"memory a trial needs, but the Ray cluster has {gpus:g}; set resources.gpu: 0 "
            "to train on CPUs, or join a cluster with GPUs (--ray-address)"
        )
    if not spec.resources.auto_gpu and gpu > 0 and gpus < gpu:
        raise ClusterError(
            f"resources.gpu: each trial asks for {gpu:g} GPU but the Ray "
            f"cluster has {gpus:g}; set resources.gpu: 0 to train on CPUs, or join a cluster "
            "with GPUs (--ray-address)"
        )
    if cpus < spec.resources.cpu:
        raise ClusterError(
            f"resources.cpu: each trial asks for {spec.resources.cpu:g} CPUs but the Ray "
            f"cluster has {cpus:g}; lower resources.cpu"
        )
    fit = math.floor(cpus / spec.resources.cpu + 1e-9)
    if not spec.resources.auto_gpu and gpu > 0:
        fit = min(fit, math.floor(gpus / gpu + 1e-9))
    limit = spec.max_concurrent or fit
    return max(1, min(limit, pending))


class WorkerLost(Exception):
    """Tune stopped because Ray lost a worker: the round's live trials were marked failed and
    their cells can run again in the next round."""


def run_round(spec: StudySpec, plans: list, parallel: int, meter: Progress, claims: Claims,
              round_no: int, identity: tuple[int, int] | None = None) -> tuple[int, int]:
    """Run this driver's share of the units the plans hold now through one Tune run; returns
    how many trials it ran and how many of them ended FAIL. `identity`: the SQLite study
    file's as the launch opened it (`storage.file_identity`)."""
    from ray import tune

    from weightsearch.sweep.gpu_share import TrialResources
    from weightsearch.sweep.searcher import CellSearcher
    from weightsearch.sweep.trainable import run_trial

    before = dict(meter.counts)
    # Tune's own experiment state (for Tune's restore, which the sweep never uses: the study
    # database is its state) can fail to sync when Ctrl-C lands mid-copy; that is no news.
    logging.getLogger("ray.tune.execution.experiment_state").setLevel(logging.CRITICAL)
    stopped: set[str] = set()
    searcher = CellSearcher(spec, plans, meter, stopped, claims, identity)
    gate = _gpu_gate(spec, plans, parallel, meter, claims, searcher)
    budget = sum(p.strategy.max_units() for p in plans)
    # One experiment folder per driver and round: two drivers started in the same second
    # never share one.
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    driver = claims.holder.rsplit(":", 1)[-1]
    _tensorboardx_without_torch()
    tuner = tune.Tuner(
        # Each trial's resources are computed when Tune creates it: its GPU share is the one
        # the gate wrote into its config (`resources.gpu: auto` shrinks it once measured).
        # Ray annotates the callable as giving a PlacementGroupFactory; Trial takes its dict too.
        tune.with_resources(run_trial, TrialResources(spec.resources.cpu)),  # type: ignore[arg-type]
        tune_config=tune.TuneConfig(
            search_alg=gate,  # the concurrency limit: `parallel`, or what the GPUs hold
            scheduler=_scheduler(spec, stopped, searcher),
            num_samples=max(1, budget),
            # A worker trains trial after trial: torch, transformers and the tokenizer load
            # once, not once per trial (BENCHMARKS.md section 3). Safe since a run gives its
            # freed heap back and measures its own peak (trainer/memory.py): before that,
            # reused workers grew to 9-12 GB over twenty MiniLM trials. A run seeds everything
            # it draws, so a reused worker trains what a fresh one would (tests check this).
            reuse_actors=spec.reuse_workers,
            trial_dirname_creator=_trial_dirname,
        ),
        run_config=tune.RunConfig(
            storage_path=str(Path(spec.workdir) / "ray"),
            name=f"{spec.study}-{stamp}-{driver}-r{round_no}",
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            verbose=0,
            callbacks=[_trial_index(searcher)],
        ),
    )
    lost: Exception | None = None
    with RayWatch(spec.study) as watch:
        try:
            tuner.fit()
        except RuntimeError as exc:  # a worker Ray lost (killed for memory, crashed)
            if not _ray_lost_a_worker(exc) and watch.lost is None:
                raise
            lost = exc
        except KeyboardInterrupt:  # the watch's SIGINT reached us outside Tune's handler
            if watch.lost is None:
                raise
        finally:
            # Ctrl-C, or Tune gave up: no trial of ours stays RUNNING.
            interrupted = searcher.abandon_live()
    if watch.lost is not None:  # the cluster itself is gone: no next round can run
        raise watch.error(interrupted)
    if searcher.must_stop is not None:
        raise searcher.must_stop
    if interrupted:  # Tune catches Ctrl-C itself and returns with trials still running
        raise KeyboardInterrupt
    if lost is not None:
        raise WorkerLost(str(lost).strip().splitlines()[0][:300]) from lost
    ran = sum(meter.counts.values()) - sum(before.values())
    return ran, meter.counts.get("FAIL", 0) - before.get("FAIL", 0)


def _gpu_gate(spec: StudySpec, plans: list, parallel: int, meter: Progress, claims: Claims,
              searcher: Any) -> Any:
    """The searcher behind the round's concurrency limit, giving each trial its GPU share
    (`sweep.gpu_gate`)."""
    import ray

    from weightsearch.sweep.gpu_gate import GpuGate
    from weightsearch.sweep.gpu_share import GpuShares

    def tell(text: str) -> None:
        say(text, meter.enabled)

    auto = spec.resources.auto_gpu
    shares = GpuShares(claims.engine, spec.study, tell) if auto else None
    return GpuGate(searcher, parallel, gpu=0.0 if auto else float(spec.resources.gpu),
                   gpus=ray.cluster_resources().get("GPU", 0.0), shares=shares,
                   studies={p.central: p.study for p in plans}, tell=tell)


def _tensorboardx_without_torch() -> None:
    """Import tensorboardX (Tune's event-file logger) with torch hidden. It imports torch only to
    recognise torch tensors among logged values, and the driver logs plain numbers: without
    this, 2 s of imports and about 200 MB of torch land in a driver that trains nothing. Where
    torch is already loaded (a notebook) there is nothing to save."""
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
    try:
        import tensorboardX  # noqa: F401
    except ImportError:  # not installed: Tune writes no event files, as before
        pass
    finally:
        del sys.modules["torch"]


def _ray_lost_a_worker(exc: BaseException) -> bool:
    """Tune's actor manager wraps a dead worker's error (RayActorError, OutOfMemoryError) in a
    RuntimeError; any other RuntimeError is a bug and propagates."""
    from ray.exceptions import RayError

    return isinstance(exc.__cause__, RayError) or isinstance(exc.__context__, RayError)


def _trial_dirname(trial: Any) -> str:
    config = trial.config
    cell = re.sub(r"[^A-Za-z0-9._=+-]", "-", str(config.get("cell", "")))[:80]
    return f"{config.get('central_task', 'cell')}_{cell}_{trial.trial_id}"


def _scheduler(spec: StudySpec, stopped: set[str], searcher: Any) -> Any:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

    from weightsearch.sweep.trainable import EPOCH, OBJECTIVE

    class StopsLost(FIFOScheduler):
        """FIFO that stops a trial whose claim another driver took over."""

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            if searcher.should_stop(trial.trial_id):
                return TrialScheduler.STOP
            return super().on_trial_result(tune_controller, trial, result)

    if spec.scheduler.name != "asha":
        return StopsLost()

    class RecordingASHA(ASHAScheduler):
        """ASHA that remembers whom it stopped, so the searcher can tell PRUNED from FAIL,
        and that stops a trial whose claim another driver took over."""

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            if searcher.should_stop(trial.trial_id):
                return TrialScheduler.STOP
            decision = super().on_trial_result(tune_controller, trial, result)
            if decision == TrialScheduler.STOP:
                stopped.add(trial.trial_id)
            return decision

    # max_t one past the last epoch: ASHA stops a trial at max_t, which would cut off the
    # trainable's final summary report that follows the last epoch.
    return RecordingASHA(
        metric=OBJECTIVE, mode="max", time_attr=EPOCH, max_t=spec.epochs + 1,
        grace_period=min(spec.scheduler.grace_period, spec.epochs),
        reduction_factor=spec.scheduler.reduction_factor,
    )


def _trial_index(searcher: Any) -> Any:
    from ray.tune import Callback

    class TrialIndex(Callback):
        """Hands the searcher Tune's trial objects, whose error files name a failure's cause."""

        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            searcher.tune_trials[trial.trial_id] = trial

    return TrialIndex()
