"""Peak memory of one run, not of the process that ran it.

A Ray worker trains trial after trial, and a notebook run after run, in one process, whose
lifetime peak (`ru_maxrss`) says nothing about the run at hand. Linux keeps that peak as
VmHWM and lets a process reset it (`/proc/self/clear_refs`, value 5, since Linux 4.0): a run
resets it when it starts and reads it when it reports, so `peak_rss_mib` is the run's own.
Where the reset is not possible (another OS, a locked-down /proc) the figure is the process's
peak, as before.

Memory given back between phases (`give_back`): glibc's malloc keeps what a process frees in
its heap, and a training step frees activations of a few MiB each in between blocks that stay,
so after an epoch (and after an evaluation) hundreds of MiB sit free but resident, and a Ray
worker or a notebook holds them into the next run. `malloc_trim(0)` returns every free page of
the heap to the system, in one call per phase. (Mapping every block of 1 MiB or more instead,
so that each is unmapped when freed, lowered a run's peak by a fifth but cost 40% more CPU in
page faults: BENCHMARKS.md section 4.)
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import re
import resource
import sys
from pathlib import Path

import torch

_CLEAR_REFS = Path("/proc/self/clear_refs")


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None (another OS or C library)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return None


def give_back() -> bool:
    """Return the heap's free pages to the system (see the module docstring); False where the
    C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
_STATUS = Path("/proc/self/status")


def reset_peak() -> None:
    """Start measuring a run: the process's peak RSS (and CUDA's peak allocation) reset.
    Without the reset, VmHWM stays the process's peak, which is what is read then."""
    with contextlib.suppress(OSError):  # another OS, or a /proc this process may not write
        _CLEAR_REFS.write_text("5")
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def peak_memory() -> dict[str, float]:
    """Peak host RSS in MiB since `reset_peak` (else of the process), and on CUDA the GPU
    figures of `gpu_peaks`."""
    hwm = _read_hwm_mib()
    if hwm is None:  # no /proc: the process's peak
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        hwm = rss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    out = {"peak_rss_mib": hwm}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out.update(gpu_peaks())
    return out


def gpu_peaks(device: int | None = None) -> dict[str, float]:
    """On the current CUDA device (or `device`), in MiB since `reset_peak`: the peak memory
    tensors held (`peak_gpu_mib`), the peak the caching allocator reserved from the driver
    (`peak_gpu_reserved_mib`: what the process held of the card, freed blocks it keeps for
    reuse included, so what a study packing trials onto one GPU must plan for), and the card's
    size (`gpu_total_mib`). The CUDA context and library workspaces come on top of both
    peaks: the allocator does not see them."""
    dev = torch.cuda.current_device() if device is None else device
    return {"peak_gpu_mib": torch.cuda.max_memory_allocated(dev) / 2**20,
            "peak_gpu_reserved_mib": torch.cuda.max_memory_reserved(dev) / 2**20,
            "gpu_total_mib": torch.cuda.get_device_properties(dev).total_memory / 2**20}


def _read_hwm_mib() -> float | None:
    try:
        found = re.search(r"^VmHWM:\s+(\d+)\s+kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) / 1024 if found else None
