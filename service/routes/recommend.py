"""GET /recommend: a central weight for a task, from evidence cached in memory (a background
refresh, at most every `refresh_s`, reads only new and unfinished trials)."""

from typing import Literal

from fastapi import APIRouter, Query

from weightsearch.recommender.asking import CLIPPING_PATTERN, ENCODER_PATTERN
from weightsearch.service.db_calls import in_thread
from weightsearch.service.deps import Database
from weightsearch.service.models import Recommendation, errors
from weightsearch.trainer import task_types


def make_router() -> APIRouter:
    """The route, built with each app: its `task_type` enum is the registry's at that time,
    so a task type registered before `create_app` is accepted and published."""
    task_type_names = Literal[task_types.NAMES]  # type: ignore[valid-type]
    router = APIRouter()

    @router.get("/recommend", response_model=Recommendation, responses=errors(400, 422, 503))
    async def recommend(database: Database,
                  train_size: int = Query(gt=0, le=10**12, description="training examples"),
                  task_type: task_type_names | None = None,  # type: ignore[valid-type]
                  encoder: str | None = Query(None, pattern=ENCODER_PATTERN, max_length=200),
                  stage: Literal["multitask", "finetuned"] | None = None,
                  clipping: str | None = Query(
                      None, pattern=CLIPPING_PATTERN, max_length=40,
                      description="the gradient clipping the answer is for: clip1 (the "
                      "default, the reference's), uclip1 or noclip; rate-clip1 etc. where the "
                      "weight was the central task's sampling rate")) -> dict:
        from weightsearch.recommender.recommend import recommend_from

        # The notes' hints name this route's query parameters, not the command's flags; they
        # begin with what decides the answer (the nearest evidence in the asked regime).
        def answer() -> dict:  # off the event loop: reading and fitting take a while
            return recommend_from(database.evidence(), train_size, task_type, encoder,
                                  stage, clipping=clipping, audience="http").to_dict()

        return await in_thread(answer)

    return router
