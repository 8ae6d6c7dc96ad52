"""Swagger UI at /docs and ReDoc at /redoc from files installed with the package
(`fastapi-offline` carries them), so the pages render on a machine without internet."""

from __future__ import annotations

from pathlib import Path

ASSETS_URL = "/docs-assets"


def assets_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def add_offline_docs(app) -> None:
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    def swagger_ui():
        return get_swagger_ui_html(
            openapi_url=app.openapi_url, title=f"{title} — API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            # Swagger UI would otherwise send the schema to validator.swagger.io for its badge.
            swagger_ui_parameters={"validatorUrl": None})

    @app.get("/redoc", include_in_schema=False)
    def redoc():
        return get_redoc_html(
            openapi_url=app.openapi_url, title=f"{title} — API",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png", with_google_fonts=False)
