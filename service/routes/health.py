"""GET /health: the server answers, its version, and which database it serves."""

from fastapi import APIRouter

from service.database import redacted
from service.deps import Database
from service.models import Health
from weightsearch import __version__

router = APIRouter()


@router.get("/health", response_model=Health)
def health(database: Database) -> dict:
    return {"status": "ok", "version": __version__, "storage": redacted(database.url)}
