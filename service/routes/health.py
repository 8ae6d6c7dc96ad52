"""GET /health: the server answers, its version, which database it serves and whether that
database answers (a fresh connection of its own, within 2 s: never the pool or the threads
the other routes may be waiting in, `service.db_calls.Probe`)."""

from fastapi import APIRouter, Request

from weightsearch import __version__
from weightsearch.service.database import redacted
from weightsearch.service.models import Health

router = APIRouter()


@router.get("/health", response_model=Health)
async def health(request: Request) -> dict:
    database = request.app.state.database
    found = await request.app.state.probe.state()
    return {"status": "ok" if found["database"] == "ok" else "degraded",
            "version": __version__, "storage": redacted(database.url), **found}
