"""Peak memory of one run, not of the process that ran it.

A Ray worker trains trial after trial, and a notebook run after run, in one process, whose
lifetime peak (`ru_maxrss`) says nothing about the run at hand. Linux keeps that peak as
VmHWM and lets a process reset it (`/proc/self/clear_refs`, value 5, since Linux 4.0): a run
resets it when it starts and reads it when it reports, so `peak_rss_mib` is the run's own.
Where the reset is not possible (another OS, a locked-down /proc) the figure is the process's
peak, as before.
"""

from __future__ import annotations

import contextlib
import re
import resource
import sys
from pathlib import Path

import torch

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def reset_peak() -> None:
    """Start measuring a run: the process's peak RSS (and CUDA's peak allocation) reset.
    Without the reset, VmHWM stays the process's peak, which is what is read then."""
    with contextlib.suppress(OSError):  # another OS, or a /proc this process may not write
        _CLEAR_REFS.write_text("5")
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def peak_memory() -> dict[str, float]:
    """Peak host RSS in MiB since `reset_peak` (else of the process), and on CUDA the peak
    GPU memory allocated."""
    hwm = _read_hwm_mib()
    if hwm is None:  # no /proc: the process's peak
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        hwm = rss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    out = {"peak_rss_mib": hwm}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def _read_hwm_mib() -> float | None:
    try:
        found = re.search(r"^VmHWM:\s+(\d+)\s+kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) / 1024 if found else None
