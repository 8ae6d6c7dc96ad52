"""Read weight-search studies through Optuna's public API (never its tables, whose schema migrates).

One study by name, every study (`StudyCache` keeps them loaded), and the study names; the
studies an import is still writing are hidden from every reader. `weightsearch.studies.central`
holds what a study read is; `weightsearch.studies.central_build` builds one from what is stored.
"""

from __future__ import annotations

import os

from weightsearch.core.errors import StorageError
from weightsearch.studies import schema
from weightsearch.studies.bulk import read_trials, state_counts
from weightsearch.studies.central import CentralStudy
from weightsearch.studies.central_build import CELL_ATTRS, CELL_PARAMS, build_central
from weightsearch.studies.dialects import sqlite_path
from weightsearch.studies.urls import shown_url

# Studies an import is still writing (`weightsearch.studies.importer`): hidden from every
# reader until the import renames them, all at once, to their final names. A study name may
# not start with ".", so no study of a user's can carry this prefix.
STAGING_PREFIX = ".weightsearch-import/"


def open_quiet(url: str, serving: bool = False):
    """`weightsearch.studies.storage.open_storage` without Optuna's chatter on the console (the
    experimental-feature warning about heartbeats, INFO lines per created study): the output of
    `inspect` and `recommend` is meant to be read or parsed."""
    import warnings

    import optuna

    from weightsearch.studies.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return open_storage(url, serving=serving)


def sqlite_file_missing(url: str) -> bool:
    """True for a SQLite URL whose file does not exist (reading it would create an empty one)."""
    path = sqlite_path(url)
    return path is not None and not os.path.exists(path)


def cell_trials(storage, study_id: int) -> list:
    return read_trials(storage, study_id, CELL_PARAMS, CELL_ATTRS)


def read_central(storage, name: str) -> CentralStudy:
    """Load one `<study>/<central>` Optuna study with its cells and curve."""
    import optuna

    study = optuna.load_study(study_name=name, storage=storage)  # a storage or its URL
    return build_central(name, schema.study_attrs(study), study.directions,
                         cell_trials(study._storage, study._study_id))


def is_staging(name: str) -> bool:
    """A study an import is still writing (or one a killed import left): no reader's."""
    return name.startswith(STAGING_PREFIX)


def study_names(storage) -> list[str]:
    # storage.get_all_studies, not optuna.get_all_study_summaries: the latter loads every trial
    # of every study (seconds for 10,000 trials) to count them.
    return sorted(s.study_name for s in storage.get_all_studies()
                  if not is_staging(s.study_name))


def read_all(storage) -> list[CentralStudy]:
    return StudyCache(storage).refresh()[1]


class StudyCache:
    """Every study of a storage, kept loaded: a refresh rebuilds only the studies whose trials
    changed state or number since the last one (one grouped count tells which)."""

    def __init__(self, storage) -> None:
        self.storage = storage
        self._seen: dict[str, tuple] = {}
        self._built: dict[str, CentralStudy] = {}

    def refresh(self) -> tuple[bool, list[CentralStudy]]:
        """(whether anything changed since the last refresh, every study, sorted by name)."""
        frozen = {s.study_name: s for s in self.storage.get_all_studies()
                  if not is_staging(s.study_name)}
        changed = set(frozen) != set(self._built)
        for name in list(self._built):
            if name not in frozen:  # deleted
                self._built.pop(name)
                self._seen.pop(name, None)
        counts = state_counts(self.storage)
        for name, fs in frozen.items():
            # A study deleted and made again under its name has a new id.
            seen = (fs._study_id, counts.get(fs._study_id, ()))
            if seen != self._seen.get(name) or name not in self._built:
                trials = cell_trials(self.storage, fs._study_id)
                attrs = schema.with_stored_spec(fs.user_attrs, fs.system_attrs)
                self._built[name] = build_central(name, attrs, fs.directions, trials)
                self._seen[name] = seen
                changed = True
        return changed, [self._built[n] for n in sorted(self._built)]


def resolve(storage, url: str, name: str) -> list[str]:
    """Optuna study names for `name`: a full `<study>/<central>` name or a base study name."""
    names = study_names(storage)
    if name in names:
        return [name]
    matches = [n for n in names if schema.split_study_name(n)[0] == name]
    if not matches:
        import difflib

        # A base name is compared with base names, a full `<study>/<central>` with full ones.
        known = sorted(set(names) if schema.SEPARATOR in name
                       else {schema.split_study_name(n)[0] for n in names})
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise StorageError(
            f"no study named {name!r} in {shown_url(url)}; {hint}`weightsearch inspect "
            f"--storage {shown_url(url)}` lists them"
        )
    return matches
