"""The `serve` subcommand: the REST service under uvicorn (needs the serve extra)."""

from __future__ import annotations

import argparse
import os

from weightsearch.core.errors import ConfigError
from weightsearch.core.extras import require_extra
from weightsearch.studies.cli import STORAGE_HELP, storage_url

TOKEN_ENV = "WEIGHTSEARCH_TOKEN"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is no TCP port; give one from 1 to 65535")
    return port


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="the REST service (studies, recommend, launch)",
                              description="Serve the study database over HTTP: read studies, "
                              f"recommend a weight, launch or resume a study. With ${TOKEN_ENV} "
                              "set, write routes need 'Authorization: Bearer <token>'. API pages "
                              "at /docs and /redoc. Needs the serve extra.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1); anything but localhost or a "
                   f"loopback address needs ${TOKEN_ENV}")
    p.add_argument("--port", type=_port, default=8000, help="TCP port, 1-65535 (default 8000)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a Host name to answer besides localhost and loopback addresses, e.g. "
                   "the name of a reverse proxy in front of a loopback server (repeatable); a "
                   "server on loopback refuses other names, against DNS rebinding")
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.set_defaults(handler=run_serve)



def run_serve(args) -> int:
    require_extra("serve", "fastapi", "fastapi_offline", "uvicorn", "jinja2",
                  feature="weightsearch serve")
    import uvicorn

    from weightsearch.service.app import create_app
    from weightsearch.service.http_limits import ACCEPT_BURST, LimitedH11Protocol
    from weightsearch.service.request_guard import is_loopback
    from weightsearch.studies.url_checks import check_persistent

    exposed = not is_loopback(args.host)
    if exposed and not os.environ.get(TOKEN_ENV):
        raise ConfigError(
            f"--host {args.host} exposes the service beyond this machine, and its POST routes "
            f"start training runs; set {TOKEN_ENV} to a secret token (clients send "
            f"'Authorization: Bearer <token>'), or bind to 127.0.0.1"
        )
    # Bound to loopback (or told which names to answer): other Host names are refused, so a
    # page whose DNS name the attacker re-points at 127.0.0.1 cannot reach the service.
    hosts = args.allow_host if not exposed or args.allow_host else None
    # Its launches would write into a database each child makes afresh and loses at exit; a
    # read-only file is served (GETs work; a launch's job says why it cannot write).
    check_persistent(storage_url(args))
    app = create_app(storage_url(args), token_env=TOKEN_ENV, require_token=exposed, hosts=hosts)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", http=LimitedH11Protocol,
                backlog=ACCEPT_BURST)
    return 0
