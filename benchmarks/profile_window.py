"""A profiler window over a trainer run's steady steps: the device's busy time and kernels per
step, and the top kernels and host ops (`bench_gpu.py`'s kernel rows, `gpu_steady.py`).

Each graph replay ends one profiler step, and on a CPU each eager step does; the window opens
after a third of the run (at most 40 steps), past the warm-up steps and the captures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from weightsearch.trainer import graphs as graph_steps
from weightsearch.trainer import step as training_step


def profiled_window(train_run: Callable[[], Any], cuda: bool, total_steps: int,
                    steps: int) -> dict:
    """Profile `steps` steady steps of `train_run()` (a run of `total_steps` steps)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    wait = min(40, total_steps // 3)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, acc_events=True,
                 schedule=schedule(wait=wait, warmup=2, active=steps, repeat=1)) as prof:
        replay, eager = graph_steps.GraphedSteps.step, training_step._eager_step

        def replayed(self: Any, *a: Any, **k: Any) -> Any:
            readings = replay(self, *a, **k)
            if readings is not None:
                prof.step()
            return readings

        def eager_step(*a: Any, **k: Any) -> Any:
            readings = eager(*a, **k)
            if not cuda:
                prof.step()
            return readings

        graph_steps.GraphedSteps.step, training_step._eager_step = replayed, eager_step
        try:
            train_run()
        finally:
            graph_steps.GraphedSteps.step, training_step._eager_step = replay, eager
    events = list(prof.events())
    device = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [e for e in device if "Memcpy" not in e.name and "Memset" not in e.name]
    window = (max(e.time_range.end for e in events) - min(e.time_range.start for e in events)
              if events else 0.0)
    table = prof.key_averages()
    by_device = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    return {"steps": steps, "device_busy_ms_per_step": busy_us(device) / 1e3 / steps,
            "kernels_per_step": len(kernels) / steps,
            "window_ms_per_step": window / 1e3 / steps,
            "tables": table.table(sort_by=by_device, row_limit=20, max_name_column_width=60)
            + "\n" + table.table(sort_by="self_cpu_time_total", row_limit=20,
                                 max_name_column_width=60)}


def busy_us(events: list[Any]) -> float:
    """Microseconds in which at least one of `events` ran: the union of their intervals (a
    profiler may report a kernel inside another device span, which a plain sum counts twice)."""
    busy, end = 0.0, float("-inf")
    for start, stop in sorted((e.time_range.start, e.time_range.end) for e in events):
        if stop <= end:
            continue
        busy += stop - max(start, end)
        end = stop
    return busy
