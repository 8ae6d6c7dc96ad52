"""Study database URLs: the default one, and how one is shown anywhere (messages, logs,
/health) with its password and secret query parameters hidden."""

from __future__ import annotations

import os
import re

DEFAULT_STORAGE = "sqlite:///weightsearch.db"
ENV_STORAGE = "WEIGHTSEARCH_STORAGE"


# Query parameters that carry a secret (libpq's `password`, `sslpassword`, a driver's token or
# key passphrase): matched by these parts of the name; `passfile` only names a file.
_SECRET_PARTS = ("pass", "pwd", "secret", "token", "key")
_NOT_SECRET = frozenset({"passfile"})
# A `name=value` pair with a secret-looking name inside a parameter's value.
_SECRET_PAIR = re.compile(r"(?i)(pass|pwd|secret|token|key)\w*\s*=")
_SENTINEL = "WSHIDDENSECRETWS"  # alphanumeric, so rendering the URL does not quote it
_UNPARSABLE = "<unparsable URL hidden>"


def _secret_param(name: str, value: object = "") -> bool:
    """A query parameter that carries a secret: by its name, or by a `pwd=...`-like pair inside
    its value (a whole connection string: ODBC's `odbc_connect`, libpq's `dsn`, `options`)."""
    lowered = name.lower()
    if lowered not in _NOT_SECRET and any(part in lowered for part in _SECRET_PARTS):
        return True
    values = [value] if isinstance(value, str) else list(value or ())  # type: ignore[call-overload]
    return any(_SECRET_PAIR.search(str(v)) for v in values)


def parsed_url(url: str):
    """SQLAlchemy's reading of `url`, None when it cannot read it at all."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url)
    except Exception:  # ArgumentError, or a ValueError from a bad port
        return None


def shown_url(url: str) -> str:
    """The URL as printed or stored anywhere (messages, logs, follow-up commands, /health): its
    password and secret query parameters replaced by ***. Parsed as SQLAlchemy parses it, so a
    password holding '/', '@' or a space is hidden whole; a URL SQLAlchemy cannot parse shows
    only its scheme."""
    text = str(url)
    if text == DEFAULT_STORAGE:  # no secret; spares the help text an import of SQLAlchemy
        return text
    parsed = parsed_url(text)
    if parsed is None:
        scheme, sep, _ = text.partition("://")
        plain = sep and scheme and scheme.replace("+", "").replace(".", "").replace(
            "-", "").isalnum() and scheme.isascii()
        return f"{scheme}://{_UNPARSABLE}" if plain else _UNPARSABLE
    secret_query = [k for k, v in parsed.query.items() if _secret_param(k, v)]
    # A host holding '@' is the tail of a password that held a raw '@'.
    odd_host = "@" in (parsed.host or "")
    if parsed.password is None and not secret_query and not odd_host:
        return text
    hidden = parsed.set(
        password=None if parsed.password is None else _SENTINEL,
        host=_SENTINEL if odd_host else parsed.host,
        query={k: (_SENTINEL if k in secret_query else v) for k, v in parsed.query.items()},
    )
    return hidden.render_as_string(hide_password=False).replace(_SENTINEL, "***")


def url_secrets(url: str) -> list[str]:
    """The secret values in `url` (its password, secret query parameters), as given and as
    URL-quoted: what `hide_secrets` removes from free text."""
    from urllib.parse import quote, quote_plus

    parsed = parsed_url(str(url))
    if parsed is None:  # nothing can be told apart: hide whatever follows the scheme
        rest = str(url).partition("://")[2]
        return [rest] if rest else []
    values = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if _secret_param(key, value):
            values += [value] if isinstance(value, str) else list(value)
    if "@" in (parsed.host or ""):
        values.append(parsed.host)
    found = {form for v in values if v for form in (v, quote(v, safe=""), quote_plus(v))}
    return sorted(found, key=len, reverse=True)  # longest first: no partial replacement


def hide_secrets(text: str, url: str | None) -> str:
    """`text` (a driver's error, a log line) with the URL shown as `shown_url` shows it and every
    secret of `url` replaced by ***. Secrets shorter than 3 characters are left (replacing every
    'p' of a message would garble it; a driver never echoes a password anyway)."""
    text = str(text)
    if not url:
        return text
    text = text.replace(str(url), shown_url(url))
    for secret in url_secrets(url):
        if len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def default_storage_url() -> str:
    return os.environ.get(ENV_STORAGE, DEFAULT_STORAGE)

