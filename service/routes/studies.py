"""Reading studies: GET /studies lists them, GET /studies/{name} shows one (POST routes, which
start runs, are in `weightsearch.service.routes.runs`)."""

from fastapi import APIRouter, HTTPException
from starlette.convertors import PathConvertor, register_url_convertor

from weightsearch.service.database import StudyDatabase
from weightsearch.service.db_calls import in_thread
from weightsearch.service.deps import Database
from weightsearch.service.models import StudyDetail, StudyList, errors
from weightsearch.studies import schema


class StudyPath(PathConvertor):
    """A study's full name (`base/central`): any path but one ending in `/resume`, which is
    POST /studies/{name}/resume's (a GET there gets 405, not a study named `x/resume`)."""

    regex = r"(?!.*/resume$).+"


register_url_convertor("study", StudyPath())
router = APIRouter()


@router.get("/studies", response_model=StudyList, responses=errors(503))
async def list_studies(database: Database) -> dict:
    return await in_thread(_list, database)


def _list(database: StudyDatabase) -> dict:
    from weightsearch.studies.inspection import overview

    return {"studies": overview(database.studies())}


@router.get("/studies/{name:study}", response_model=StudyDetail, responses=errors(404, 422, 503))
async def get_study(name: str, database: Database) -> dict:
    return await in_thread(study_detail, name, database)


def study_detail(name: str, database: StudyDatabase) -> dict:
    """A study by its full name, or every central-task study under a base name (the results
    site's study page shows the same)."""
    from weightsearch.studies.inspection import cell_rows
    from weightsearch.studies.methods import comparison, is_methods_study, method_rows

    every = database.studies()
    studies = [s for s in every if s.name == name] or \
        [s for s in every if schema.split_study_name(s.name)[0] == name]
    if not studies:
        raise HTTPException(404, f"no study named {name!r}; GET /studies lists them")
    cells = cell_rows(studies)
    out = []
    for s in studies:
        detail = {**s.summary(), "curve": [vars(w) for w in s.curve],
                  "cells": [c for c in cells if c["central_task"] == s.central_task]}
        if is_methods_study(s):  # the compute-fair comparison, as `inspect` gives it
            detail.update(comparison(s, method_rows(s)))
        out.append(detail)
    return {"study": name, "central_tasks": out}
