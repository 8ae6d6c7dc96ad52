"""A worker Ray lost (killed for memory) ends a round, not the driver; other errors are bugs."""

from __future__ import annotations

from ray.exceptions import OutOfMemoryError

from weightsearch.sweep.tuning import _ray_lost_a_worker


def test_a_lost_worker_is_told_apart_from_a_bug():
    try:
        try:
            raise OutOfMemoryError("1 worker(s) were killed due to the node running low")
        except OutOfMemoryError as oom:
            raise RuntimeError("Caught unexpected exception: 1 worker(s) were killed") from oom
    except RuntimeError as wrapped:
        assert _ray_lost_a_worker(wrapped)
    assert not _ray_lost_a_worker(RuntimeError("a bug in the searcher"))
