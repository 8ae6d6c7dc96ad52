"""Pydantic models of the service's requests, answers and errors: they make the OpenAPI schema
typed, so generated clients and Swagger's "try it" work."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from weightsearch.sweep.spec import study_file_schema


class ErrorBody(BaseModel):
    """Every error the service answers, whatever its status (400, 401, 403, 404, 405, 408, 409,
    413, 414, 415, 422, 429, 431, 503, 500): one message, and the list of single problems
    behind it (each invalid setting of a study file, each invalid query parameter; empty when
    there is one)."""

    detail: str = Field(description="what is wrong and how to fix it")
    problems: list[str] = Field(default_factory=list,
                                description="each problem on its own, e.g. 'query.train_size: "
                                "Input should be greater than 0'")


class Health(BaseModel):
    status: str = Field(description="ok, or degraded when the study database does not answer")
    version: str
    storage: str = Field(description="the study database URL, password hidden")
    database: str = Field("ok", description="ok, unreachable, or unknown (a probe runs)")
    database_detail: str | None = Field(None, description="why it is not ok")


class StudyRow(BaseModel):
    model_config = ConfigDict(extra="allow")

    study: str
    source: str | None = None
    central_tasks: list[str]
    complete: int
    running: int
    failed: int
    pending: int
    pruned: int
    best_weights: dict[str, float | None]


class StudyList(BaseModel):
    studies: list[StudyRow]


class SameUpdates(BaseModel):
    """Central weights whose cells trained the same updates: global clipping clipped every
    update of the central task, so the weight had no say (`weightsearch.studies.treatments`)."""

    weights: list[float]
    rest: str | None = Field(description="the rest of the search point, e.g. grad_clip=1")
    grad_clip: float
    acts_below: float | None = Field(description="the weight above which the median central "
                                     "update is clipped (a mix of in-focus and off-focus "
                                     "updates)")
    saturates_in_focus: float | None = Field(
        None, description="the weight above which every in-focus central update is clipped "
        "(median over the arm's runs; null where not recorded)")
    saturates_off_focus: float | None = Field(
        None, description="the weight above which every off-focus central update is clipped "
        "(median over the arm's runs; null where not recorded)")
    whole_grid: bool = Field(description="every weight trained at this point is in it")
    text: str


class CentralTaskDetail(BaseModel):
    """One central task: its summary, the metric per weight (`curve`) and every cell; in a
    study that compares methods, the compute-fair comparison (`methods`, one row per method,
    and `methods_conclusion`, as `weightsearch inspect` prints them)."""

    model_config = ConfigDict(extra="allow")

    curve: list[dict[str, Any]]
    cells: list[dict[str, Any]]
    same_updates: list[SameUpdates] = Field(
        default_factory=list, description="weights that trained the same updates")
    clipping: list[dict[str, Any]] = Field(
        default_factory=list, description="the central task's clipping per weight: clip_share, "
        "median_norm, acts_below, saturates_in_focus, saturates_off_focus, all_clipped")
    not_separated: list[Any] = Field(
        default_factory=list, description="weights the trials do not separate from the best")
    ties: list[Any] = Field(default_factory=list,
                            description="weights whose scores sum exactly to the best's")
    methods: list[dict[str, Any]] | None = None
    methods_conclusion: str | None = None


class StudyDetail(BaseModel):
    study: str
    central_tasks: list[CentralTaskDetail]


class Recommendation(BaseModel):
    central_weight: float
    interval: list[float] = Field(description="plausible range of the best weight (80%), "
                                  "never narrower than `equivalent`")
    equivalent: list[float] | None = Field(
        None, description="[low, high]: the weights that no measurement in the asked regime at "
        "sizes like the one asked (within a factor of 3) separates from its best by seed "
        "noise; null where nothing near was measured with its seed noise known, or the "
        "measurements disagree")
    choice_matters: bool | None = Field(
        None, description="whether some weight measured at sizes like the one asked did worse "
        "than the best by more than seed noise; null where unknown")
    saturates_at: float | None = Field(
        None, description="the smallest weight from which every central update was clipped "
        "(global clipping) at sizes like the one asked: larger weights train the same updates; "
        "null where not seen")
    law_interval: list[float] = Field(
        default_factory=list, description="the law's own 80% interval for the best weight, "
        "before it was widened to the equivalent weights")
    train_size: int
    task_type: str | None
    source: str = Field(description="prior, studies or both")
    regime: dict[str, str] = Field(description="the encoder, its size, the stage, the "
                                   "weighting variant and the gradient clipping the answer "
                                   "is built for")
    notes: list[str] = Field(description="which evidence was used and which was discounted")
    summary: list[str] = Field(
        default_factory=list, description="what decides the answer, in plain sentences: the "
        "nearest evidence in the asked regime, and whether the weights near the asked size "
        "are within seed noise of each other")
    evidence: list[dict[str, Any]]
    effective_points: float
    method: str
    unmatched_encoder: dict[str, Any] | None = Field(
        None, description="set when no study used the encoder asked for: the answer comes "
        "from the other regimes; lists the encoders the evidence has")
    regime_offsets: list[dict[str, Any]] = Field(
        default_factory=list, description="each other regime's shared offset from the asked "
        "one, in weight units: regime, differs_in, offset, sd")
    law: dict[str, Any] = Field(
        default_factory=dict, description="the fitted law: slope per decade and level at "
        "10,000 examples (with sds), the slope the data alone give (slope_data_alone, "
        "slope_data_alone_sd; null where the data do not inform it) and the prior's share of "
        "the slope's precision (slope_prior_share), the probability of each shape (line, "
        "transition, the paper's rule), the task scatter's sd and the share of tasks that "
        "ignore the law")
    evidence_shares: list[dict[str, Any]] = Field(
        default_factory=list, description="how much of the answer rests on each regime's "
        "evidence and on the law's prior level, largest first, summing to 1: source (asked "
        "regime, other regime or law prior), regime, name, from (the paper's table, built-in "
        "or your studies), points, share (how far the answer moves when that evidence moves "
        "by one weight unit; another regime's offset takes up most of a shift of all its "
        "points), say (its points' summed say, as in the evidence list)")
    asked_regime_sizes: dict[str, Any] = Field(
        default_factory=dict, description="the training sizes measured in the asked regime: "
        "smallest, largest, points, position of the size asked (inside, below, above, or "
        "no evidence), and sizes (each size measured)")


class Started(BaseModel):
    study: str
    job: int = Field(description="GET /jobs/{job} follows it, DELETE /jobs/{job} cancels it")
    pid: int = Field(description="process id of the started `weightsearch` command")
    log: str = Field(description="its log file on the server")


STUDY_FILE_BODY = {
    "requestBody": {
        "required": True,
        "description": "a study file (see docs/studies.md), as YAML or JSON",
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": study_file_schema()},
        },
    }
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entry documenting these error codes with the one error shape."""
    reasons = {400: "invalid input", 401: "bearer token missing", 403: "wrong token, or a "
               "cross-origin write", 404: "no such study", 408: "the body did not arrive "
               "in time", 409: "the study already exists, or cannot be resumed or written",
               413: "body too large", 415: "body neither JSON nor YAML",
               422: "invalid path or query parameters (each one in `problems`)",
               429: "the server is busy reading other study files; retry after the "
               "Retry-After header's seconds", 503: "the study database is unreachable, or "
               "checking the study's data took too long"}
    # The explicit JSON content keeps errors JSON on routes that answer text (the job log).
    json_error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {code: {"model": ErrorBody, "description": reasons[code], "content": json_error}
            for code in codes}


class JobInfo(BaseModel):
    id: int
    kind: str = Field(description="launch or resume")
    study: str
    state: str = Field(description="running, cancelling (SIGTERM sent; SIGKILL follows after a "
                       "grace period), succeeded, failed or cancelled")
    pid: int
    returncode: int | None
    log: str
    started: dt.datetime = Field(description="when it started (ISO 8601, UTC)")
    ended: dt.datetime | None = Field(None, description="when it ended (ISO 8601, UTC); null "
                                      "while it runs")
    updated: dt.datetime | None = Field(None, description="when its log was last written "
                                        "(ISO 8601, UTC)")
    progress: str = Field(description="the last line of the job's log")


class JobList(BaseModel):
    jobs: list[JobInfo]
