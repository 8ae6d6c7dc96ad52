"""GET /health: the server answers, its version, and which database it serves."""

from fastapi import APIRouter

from weightsearch import __version__
from weightsearch.service.database import redacted
from weightsearch.service.deps import Database
from weightsearch.service.models import Health

router = APIRouter()


@router.get("/health", response_model=Health)
def health(database: Database) -> dict:
    return {"status": "ok", "version": __version__, "storage": redacted(database.url)}
