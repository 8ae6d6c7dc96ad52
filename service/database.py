"""The study database as the service reads it: opened once, every study kept loaded, and the
recommender's evidence refreshed in the background."""

from __future__ import annotations

import importlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from weightsearch.recommender.evidence import (
    builtin_evidence,
    load_evidence,
    merge_evidence,
    study_evidence,
)
from weightsearch.studies import schema

if TYPE_CHECKING:
    from weightsearch.recommender.evidence import Evidence
    from weightsearch.studies.reading import StudyCache

log = logging.getLogger("weightsearch.service")


class StudyDatabase:
    """The storage, opened once (opening checks the schema: too slow per request); every study,
    kept loaded (`StudyCache`: a refresh rebuilds only the studies whose trials changed); and the
    recommender's evidence, refreshed in the background when older than `refresh_s`."""

    def __init__(self, url: str, refresh_s: float) -> None:
        self.url = url
        self.refresh_s = refresh_s
        self._storage: Any = None  # optuna's RDBStorage, opened on first use
        self._identity: tuple[int, int] | None = None  # of the SQLite file opened
        self._cache: StudyCache | None = None
        self._open_lock = threading.Lock()
        self._lock = threading.Lock()  # the StudyCache is not thread-safe
        self._evidence: Evidence | None = None
        self._checked = 0.0
        self._refreshing = False
        self._failure: BaseException = RuntimeError("the study database was not read yet")

    def storage(self):
        """The Optuna storage, or None while a SQLite file does not exist yet. A SQLite file
        replaced under the service (a backup copied over it) or deleted is noticed here, by
        the file's identity, and opened afresh: its connections would go on reading the old
        file, while the jobs the service starts open the path."""
        from weightsearch.studies.reading import open_quiet, sqlite_file_missing
        from weightsearch.studies.storage_failures import file_identity

        opened = self._storage
        if opened is not None and self._identity is not None and \
                file_identity(self.url) != self._identity:
            self._forget(opened)
        if self._storage is None:
            with self._open_lock:
                if self._storage is None and not sqlite_file_missing(self.url):
                    self._storage = open_quiet(self.url, serving=True)
                    self._identity = file_identity(self.url)
        return self._storage

    def _forget(self, stale) -> None:
        """Drop the storage `stale`, opened on a file that is no longer at its path, and all
        read from it (the studies, the evidence); nothing when another request did already."""
        with self._open_lock, self._lock:
            if self._storage is not stale:
                return
            old, self._storage, self._identity = self._storage, None, None
            self._cache, self._evidence = None, None
        log.warning("the study database %s was replaced or deleted; reading it afresh",
                    redacted(self.url))
        engine = getattr(old, "engine", None)
        if engine is not None:
            engine.dispose()

    def studies(self) -> list:
        """Every study, up to date (a cheap refresh); updates the evidence when they changed."""
        from weightsearch.studies.reading import StudyCache

        storage = self.storage()
        if storage is None:
            if self._evidence is None:
                self._evidence = load_evidence(None)
            return []
        with self._lock:
            if self._storage is not storage:  # replaced meanwhile: read the one open now
                storage = self._storage
                if storage is None:
                    return []
                self._cache = None
            if self._cache is None:
                self._cache = StudyCache(storage)
            changed, studies = self._cache.refresh()
            if changed or self._evidence is None:
                self._evidence = merge_evidence(builtin_evidence(), study_evidence(studies))
            self._checked = time.monotonic()
        return studies

    def exists(self, name: str) -> bool:
        """Whether a study `name`, or a central-task study under base name `name`, is stored."""
        from weightsearch.studies.reading import study_names

        storage = self.storage()
        names = [] if storage is None else study_names(storage)
        return any(n == name or schema.split_study_name(n)[0] == name for n in names)

    def evidence(self):
        if self._evidence is None:
            self.refresh()
            if self._evidence is None:  # never read: answering from the built-in evidence
                raise self._failure     # alone would ignore the user's studies unsaid
        elif time.monotonic() - self._checked > self.refresh_s and not self._refreshing:
            self._refreshing = True
            threading.Thread(target=self.refresh, daemon=True).start()
        return self._evidence

    def refresh(self) -> None:
        try:
            self.studies()
        except Exception as exc:  # keep serving the last good evidence; the log says why
            from weightsearch.studies.storage_failures import storage_failure
            from weightsearch.studies.urls import hide_secrets

            self._failure = storage_failure(exc, self.url) or exc
            log.warning("refreshing the recommender's evidence from %s failed: %s",
                        redacted(self.url), hide_secrets(str(self._failure), self.url))
        finally:
            self._checked = time.monotonic()
            self._refreshing = False


def warm_up(database: StudyDatabase) -> None:
    """Before the first request: read the studies, and import what reading a study file needs
    (a third of a second), so that no request pays for it."""
    database.refresh()
    # The study file's spec imports the run config on first use.
    for module in ("weightsearch.sweep.spec", "weightsearch.trainer.config"):
        importlib.import_module(module)


def redacted(url: str) -> str:
    """The URL with its password and secret query parameters hidden, for /health: the one
    redaction every message uses (`weightsearch.studies.urls.shown_url`)."""
    from weightsearch.studies.urls import shown_url

    return shown_url(url)
