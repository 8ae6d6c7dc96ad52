"""Launch or resume a study: plan -> run -> summarise.

Order matters for "bad input leaves the database unchanged": the spec, the storage URL, the
data files and the Ray address are all checked before the first write, and the studies are
created only once Ray is up with the resources the trials ask for.

Jobs live in their own modules: `study_db` (the Optuna studies and their trials), `tuning`
(Ray and Tune), `searcher` (units handed to Tune, claimed in the database; each central
task's plan in `driver_state`), `summary`.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

from weightsearch.core.errors import ClusterError, ConfigError
from weightsearch.studies import schema as S
from weightsearch.studies.claims import Claims
from weightsearch.studies.dialects import sqlite_path
from weightsearch.studies.storage import open_storage
from weightsearch.studies.storage_failures import check_same_file, file_identity
from weightsearch.studies.url_checks import check_url
from weightsearch.studies.urls import default_storage_url
from weightsearch.sweep import lookup, study_db, tuning
from weightsearch.sweep.driver_state import CentralPlan
from weightsearch.sweep.inert_grid import refuse_clipped_grids
from weightsearch.sweep.progress import Progress, say
from weightsearch.sweep.space import Point
from weightsearch.sweep.spec import StudySpec, load_study_spec
from weightsearch.sweep.strategies import STRATEGIES
from weightsearch.sweep.study_db import Central
from weightsearch.sweep.summary import SweepSummary, summarise

MAX_LOST_ROUNDS = 3  # rounds in a row in which Ray lost a worker before the driver gives up


def launch(
    spec: StudySpec,
    storage_url: str | None = None,
    ray_address: str | None = None,
    progress: bool = True,
) -> SweepSummary:
    """Run every pending unit of `spec`; units already finished in the database are skipped."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage_url or spec.storage or default_storage_url()
    check_url(url, write=True)  # in memory or read-only: refused before Ray starts
    if ray_address:
        tuning.check_ray_address(ray_address)

    # plan: everything checked (the data before the storage is opened, which creates a new
    # SQLite file), nothing written yet
    centrals = [study_db.describe(spec, c) for c in spec.central_tasks]
    new_file = sqlite_path(url) is not None and file_identity(url) is None
    if new_file:  # nothing stored yet: a grid of one treatment is refused before the file is made
        _refuse_foreign_runs(spec, [c.name for c in centrals], url)
        refuse_clipped_grids(spec, [c.name for c in centrals], progress)
    storage = _open(url)
    # The file every write and the summary go to: a driver whose file is deleted or replaced
    # under it says so instead of summarising results that exist nowhere.
    identity = file_identity(url)
    existing = study_db.existing_studies(spec, storage, url, centrals)
    _refuse_foreign_runs(spec, [c.name for c in centrals if c.name not in existing], url)
    first = first_points(spec, centrals, url, existing)  # before the studies record it
    pending = _pending(spec, centrals, existing, first)
    if pending and not new_file:  # the central tasks without a finished cell to judge from
        refuse_clipped_grids(spec, [c.name for c in centrals
                                    if not study_db.has_finished_cell(existing.get(c.name))],
                             progress)
    if pending == 0:
        summary = summarise(spec, storage, url, centrals, ran=0, failed=0, first=first)
        check_same_file(url, identity)
        return summary

    # run
    started_ray = tuning.start_ray(ray_address, verbose=progress)
    try:
        parallel = tuning.concurrency(spec, pending)
        studies = study_db.create_studies(spec, storage, url, centrals, existing)
        lookup.ensure_indexes(storage.engine)
        plans = [CentralPlan(c.name, studies[c.name], spec.strategy(c.name, first[c.name]),
                             c.attrs[S.A_PRIMARY], c.attrs[S.A_STAGE]) for c in centrals]
        metrics = {c.name: c.attrs[S.A_PRIMARY] for c in centrals}
        # A fused trial trains up to fuse_cells cells at once (auto: sized later, by the
        # searcher, which raises this).
        per_trial = 1 if spec.fuse_auto else spec.fuse_cap
        meter = Progress(spec.study, pending, parallel * per_trial, enabled=progress,
                         metric=metrics)
        try:
            ran, failed = _rounds(spec, plans, parallel, meter, Claims(storage.engine),
                                  identity)
        finally:
            meter.close()
        check_same_file(url, identity, meter.finished_cells)
        # summarise, from the file that is still the one at its path once read
        summary = summarise(spec, storage, url, centrals, ran=ran, failed=failed, first=first)
        check_same_file(url, identity, meter.finished_cells)
        return summary
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
    check_url(url, write=True)
    storage = _open(url)
    spec = load_study_spec(study_db.stored_spec(study_name, storage, url))
    return launch(spec, storage_url=url, ray_address=ray_address, progress=progress)


def _open(url: str) -> Any:
    with warnings.catch_warnings():  # heartbeats are an "experimental" Optuna feature
        warnings.simplefilter("ignore", category=Warning)
        return open_storage(url)


def _refuse_foreign_runs(spec: StudySpec, new_studies: list[str], url: str) -> None:
    """A study new to this database whose cell folders already hold runs (the study launched
    before against another database, or a file with the same name and workdir): its trials
    would continue those runs, or fail on their other settings, inside Ray. Refused here."""
    from weightsearch.studies.urls import shown_url

    for central in new_studies:
        folder = Path(spec.workdir) / spec.study / central
        runs = sorted(folder.glob("*/config.yaml")) if folder.is_dir() else []
        if runs:
            raise ConfigError([
                f"workdir: {folder} already holds {len(runs)} run folder(s) (e.g. "
                f"{runs[0].parent.name}) of a study {shown_url(url)} does not know, launched "
                "before against another database; launch with that database, give another "
                f"workdir, or move {folder} away"])


def _pending(spec: StudySpec, centrals: list[Central], existing: dict[str, Any],
             first: dict[str, list[Point]]) -> int:
    """Units left, all central tasks together (an adaptive strategy's known ones)."""
    left = 0
    for c in centrals:
        study = existing.get(c.name)
        records = study_db.records(study, spec.space, c.name) if study is not None else []
        done, total = spec.strategy(c.name, first.get(c.name, ())).progress(records)
        left += total - done
    return left


def _rounds(spec: StudySpec, plans: list[CentralPlan], parallel: int, meter: Progress,
            claims: Claims, identity: tuple[int, int] | None) -> tuple[int, int]:
    """Tune runs until no unit is left that this driver could train. Between runs it waits for
    the units other drivers hold: every driver reports the study's final state."""
    ran = failed = lost = 0
    claims.start()
    try:
        for round_no in range(1, 1_000_000):
            for plan in plans:
                plan.queue.clear()
                plan.tried.clear()
                plan.deferred.clear()
                plan.dirty = True
            if not any(p.strategy.units(p.records()) for p in plans):
                break
            try:
                n_ran, n_failed = tuning.run_round(spec, plans, parallel, meter, claims,
                                                   round_no, identity)
            except tuning.WorkerLost as exc:
                lost += 1
                if lost > MAX_LOST_ROUNDS:
                    raise ClusterError(
                        f"Ray lost a worker in {lost} rounds in a row ({exc}); the cells it "
                        f"held are marked failed: check the machine's memory and `weightsearch "
                        f"resume {spec.study}`") from exc
                say(f"[{spec.study}] Ray lost a worker ({exc}); its cells run again in a "
                    "fresh round", meter.enabled)
                continue
            lost = 0
            ran, failed = ran + n_ran, failed + n_failed
            if not any(p.deferred for p in plans) or (n_failed and not n_ran - n_failed):
                break  # nothing held elsewhere (or only failures here): report
            held = sum(len(p.deferred) for p in plans)
            say(f"[{spec.study}] waiting for {held} units other drivers hold", meter.enabled)
            if not n_ran:  # a round that found nothing to take: look less often
                time.sleep(min(5.0, claims.ttl / 4))
            _wait_for_others(plans, claims)
    finally:
        claims.stop()
    return ran, failed


def _wait_for_others(plans: list[CentralPlan], claims: Claims, poll_s: float = 1.0) -> None:
    """Until a unit this driver could take appears: one whose lease ended (its holder finished,
    failed or died) or a new one (the next halving rung). One small query a second, and no
    Tune run (nor Ray experiment folder) per look."""
    while True:
        time.sleep(poll_s)
        for plan in plans:
            units = plan.strategy.units(plan.records())
            if not units:
                continue  # this study is finished
            held = claims.held_by_others(plan.name)
            if any(u.key not in held for u in units):
                return
        if not any(p.strategy.units(p.records()) for p in plans):
            return


def first_points(spec: StudySpec, centrals: list[Central], url: str,
                 existing: dict[str, Any] | None = None) -> dict[str, list[Point]]:
    """Points each central task's strategy tries first: the spec's warm start, or the
    recommender's answer for the task's training-set size and the study's regime (encoder,
    stage, variant), from the finished studies and the paper's prior, made into points by the
    strategy (`Strategy.recommended_first`: a guided search starts at it; halving orders its
    grid by distance from it, and with `start: recommend` trains only the weights around it).
    The strategy asks for the answer without `warm_start: recommend` when its settings start
    from it (`Strategy.wants_recommendation`). The answer is recorded with a new study and read
    back from an existing one, so that every driver and every resume starts from the same
    points."""
    strategy = STRATEGIES[spec.search.strategy]
    settings = spec.search.settings
    if not (spec.warm_recommend or strategy.wants_recommendation(settings)):
        # (the spec checks that a recommendation's space searches the central weight)
        return {c.name: list(spec.warm_start) for c in centrals}
    from weightsearch.recommender.asking import asked_encoder
    from weightsearch.recommender.recommend import recommend

    out: dict[str, list[Point]] = {}
    for c in centrals:
        study = (existing or {}).get(c.name)
        answer = study.user_attrs.get(S.A_RECOMMENDATION) if study is not None else None
        if not isinstance(answer, dict):
            rec = recommend(c.attrs[S.A_TRAIN_SIZE], c.attrs[S.A_TASK_TYPE], url,
                            encoder=asked_encoder(c.attrs.get(S.A_ENCODER)),
                            stage=c.attrs.get(S.A_STAGE), variant=c.attrs.get(S.A_VARIANT),
                            encoder_size=c.attrs.get(S.A_ENCODER_SIZE), typed_by_user=False)
            # The law's own 80% interval: where the best weight probably lies, which a search
            # narrows to; `interval` also spans every weight within noise of the best nearby.
            answer = {"central_weight": rec.central_weight, "interval": list(rec.law_interval),
                      "regime": rec.regime}
            c.attrs[S.A_RECOMMENDATION] = answer  # written when the study is created
        out[c.name] = strategy.recommended_first(settings, spec.space, c.name,
                                                 float(answer["central_weight"]),
                                                 answer["interval"])
    return out
