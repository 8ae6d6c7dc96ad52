"""The service's routes, one `APIRouter` per resource; `weightsearch.service.app.create_app`
includes them.

The route modules do without `from __future__ import annotations`: FastAPI reads their
signatures (Annotated dependencies, Literal query types) at runtime.
"""
