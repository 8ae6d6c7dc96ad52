"""The project's one exception root.

Every error caused by user input derives from `WeightsearchError`; the CLI turns it into a
message on stderr and exit code 2 (usage) without a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator


class WeightsearchError(Exception):
    """Root of every error the project raises on purpose."""

    exit_code = 2


class ConfigError(WeightsearchError):
    """One or more invalid settings; `problems` lists every one of them at once."""

    def __init__(self, problems: list[str] | str, source: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        head = f"invalid configuration in {source}" if source else "invalid configuration"
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{head}:\n{body}")


class MissingExtra(ConfigError):
    """A feature's optional dependencies are not installed; the message names the extra."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.args = (message,)

    def __str__(self) -> str:
        return self.args[0]


class DataError(WeightsearchError):
    """A data file is missing, unreadable, or does not match its task definition."""


class StorageError(WeightsearchError):
    """The study database cannot be reached or does not hold what was asked for."""


class ClusterError(WeightsearchError):
    """Ray cannot be started or the given cluster address does not answer."""


class TrainingDiverged(WeightsearchError):
    """A run's loss or dev metrics stopped being finite numbers: its results would mean
    nothing, so it stops instead of reporting them (exit 1: the input was valid)."""

    exit_code = 1


class DiskFull(WeightsearchError):
    """A file could not be written because its disk is full (exit 1: the input was valid)."""

    exit_code = 1


def causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what caused it, and so on (`__cause__`, else `__context__`): libraries wrap
    the error a user can act on (a full disk, a damaged database) in their own."""
    seen: set[int] = set()
    item: BaseException | None = exc
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        yield item
        item = item.__cause__ or item.__context__
