"""The site's pages: `/` (the studies), `/ui/studies/{name}` (one study's curves),
`/ui/recommend` (the answer for a training size), `/ui/across` (best weights across tasks) and
their two static files. Read-only GETs; each page's numbers come from the function behind its
JSON route, and every response carries a Content-Security-Policy that allows no inline script
or style and no request beyond this server."""

# No `from __future__ import annotations`: FastAPI reads these signatures at runtime.
import re
import threading
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

from weightsearch.service.db_calls import in_thread
from weightsearch.service.deps import Database
from weightsearch.service.ui import pages

HERE = Path(__file__).parent
STATIC = {"ui.css": "text/css", "ui.js": "text/javascript", "icon.svg": "image/svg+xml"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
ASK_FIELDS = ("train_size", "task_type", "encoder", "stage", "clipping")
MAX_FIELD = 200  # characters of a form field, as the JSON route's encoder
router = APIRouter(include_in_schema=False)
_DRAWN: dict[tuple, tuple] = {}  # the across-tasks chart per evidence and question
_DRAWN_LOCK = threading.Lock()
_templates: Any = None


def _render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    global _templates
    if _templates is None:  # jinja2 is the serve extra's, like fastapi: loaded on first use
        import jinja2

        _templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                        autoescape=True, undefined=jinja2.StrictUndefined)
    html = _templates.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


async def _read(database: Any, call: Any, *args: Any) -> tuple[Any, HTMLResponse | None]:
    """`call(*args)` off the event loop, or the page that says why it failed: the JSON
    routes' statuses (404 no such study, 503 the database), as a page a browser shows."""
    from weightsearch.core.errors import StorageError, WeightsearchError
    from weightsearch.studies.storage_failures import storage_failure

    try:
        return await in_thread(call, *args), None
    except HTTPException as failed:
        return None, _problem(failed.status_code, str(failed.detail))
    except WeightsearchError as failed:
        return None, _problem(503 if isinstance(failed, StorageError) else 400, str(failed))
    except Exception as failed:
        failure = storage_failure(failed, database.url)
        if failure is None:
            raise
        return None, _problem(503, str(failure))


def _problem(status: int, what: str) -> HTMLResponse:
    title = {404: "Not found", 503: "The study database is not answering"}.get(status,
                                                                              "Cannot show it")
    return _render("missing.html", status=status, title=title, what=what, page="")


@router.get("/ui/static/{name}")
async def static_file(name: str) -> FileResponse:
    if name not in STATIC:
        raise HTTPException(404, f"no file {name!r} here")
    return FileResponse(HERE / "static" / name, media_type=STATIC[name],
                        headers={k: v for k, v in SECURITY_HEADERS.items()
                                 if k != "Cache-Control"})


@router.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def studies_page(database: Database) -> HTMLResponse:
    def read() -> list[dict]:
        from weightsearch.studies.inspection import overview

        studies = database.studies()
        return pages.study_rows(overview(studies), studies)

    rows, failed = await _read(database, read)
    return failed or _render("studies.html", rows=rows, page="studies")


@router.api_route("/ui/studies/{name:study}", methods=["GET", "HEAD"],
                  response_class=HTMLResponse)
async def study_page(name: str, database: Database, page: str = "1") -> HTMLResponse:
    from weightsearch.service.routes.studies import study_detail

    if not (page.isascii() and page.isdigit() and len(page) <= 9 and int(page) >= 1):
        return _problem(400, "page: a whole number from 1 (the page of each central task's "
                        "cells)")
    detail, failed = await _read(database, study_detail, name, database)
    return failed or _render("study.html", **pages.study_page(detail, int(page)),
                             page="studies")


def _asked(request: Request) -> tuple[dict[str, str], list[str]]:
    """The form's fields as typed, and what is wrong with them (the JSON route's rules)."""
    from weightsearch.recommender.asking import CLIPPING_PATTERN, ENCODER_PATTERN
    from weightsearch.trainer import task_types

    typed = {k: request.query_params.get(k, "").strip() for k in ASK_FIELDS}
    # An over-long field is refused, not cut: the answer would be for another question.
    problems = [f"{k}: at most {MAX_FIELD} characters" for k, v in typed.items()
                if len(v) > MAX_FIELD]
    asked = {k: v[:MAX_FIELD] for k, v in typed.items()}
    size = asked["train_size"]
    # ASCII digits only, as the JSON route: str.isdigit() also takes '²', which int() refuses
    if size and not (size.isascii() and size.isdigit() and 0 < int(size) <= 10**12):
        problems.append("train_size: a whole number of training examples, 1 to 10^12")
    if asked["task_type"] and asked["task_type"] not in task_types.NAMES:
        problems.append(f"task_type: one of {', '.join(task_types.NAMES)}, or leave it empty")
    if asked["encoder"] and not re.match(ENCODER_PATTERN, asked["encoder"]):
        problems.append("encoder: a name like all-minilm-l6-v2, or leave it empty")
    if asked["stage"] and asked["stage"] not in ("multitask", "finetuned"):
        problems.append("stage: multitask or finetuned, or leave it empty")
    if asked["clipping"] and not re.match(CLIPPING_PATTERN, asked["clipping"]):
        problems.append("clipping: clip1, uclip1, noclip (rate- before each for a sampling "
                        "rate), or leave it empty")
    return asked, problems


def _answer(database: Any, size: int, asked: dict[str, str]) -> dict:
    from weightsearch.recommender.recommend import recommend_from

    return recommend_from(database.evidence(), size, asked["task_type"] or None,
                          asked["encoder"] or None, asked["stage"] or None,
                          clipping=asked["clipping"] or None, audience="http").to_dict()


@router.api_route("/ui/recommend", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def recommend_page(request: Request, database: Database) -> HTMLResponse:
    from weightsearch.trainer import task_types

    asked, problems = _asked(request)
    shown: dict = {"answer": None}
    if asked["train_size"] and not problems:
        answer, failed = await _read(database, _answer, database, int(asked["train_size"]),
                                     asked)
        if failed:
            return failed
        shown = pages.recommend_page(answer)
    return _render("recommend.html", status=400 if problems else 200, asked=asked,
                   problems=problems, task_types=task_types.NAMES, page="recommend", **shown)


@router.api_route("/ui/across", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def across_page(request: Request, database: Database) -> HTMLResponse:
    asked, problems = _asked(request)
    if problems:
        return _render("across.html", status=400, asked=asked, problems=problems,
                       page="across", chart="", legend=[], answer=None)

    def draw() -> tuple[str, list[dict], dict]:
        evidence = database.evidence()
        # the chart spans every size: the asked train_size changes nothing drawn
        key = (id(evidence), tuple(v for k, v in asked.items() if k != "train_size"))
        drawn = _DRAWN.get(key)
        if drawn is None:  # a page per size of the law's band: drawn once per evidence
            answers = [_answer(database, round(size), asked) for size in pages.LAW_SIZES]
            chart, legend = pages.across_chart(answers[0]["evidence"], pages.law_band(answers))
            drawn = (evidence, chart, legend, answers[0])  # the evidence kept: its id is not
            with _DRAWN_LOCK:  # reused meanwhile; requests draw in threads of their own
                while len(_DRAWN) >= 8:
                    _DRAWN.pop(next(iter(_DRAWN)))
                _DRAWN[key] = drawn
        return drawn[1:]

    drawn, failed = await _read(database, draw)
    if failed:
        return failed
    chart, legend, first = drawn
    return _render("across.html", asked=asked, problems=[], page="across", chart=chart,
                   legend=legend, answer=first)


@router.api_route("/ui/{rest:path}", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def no_such_page(rest: str) -> HTMLResponse:
    return _problem(404, "no such page here; the studies are at /")
