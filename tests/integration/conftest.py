"""Fixtures the integration tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray of two CPUs for one test module's studies."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
