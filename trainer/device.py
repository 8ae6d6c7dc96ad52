"""Device and numeric precision, decided once per run."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from weightsearch.core.errors import ConfigError


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None  # None: full fp32

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return _autocast(self.device.type, self.autocast_dtype)

    def backward(self) -> contextlib.AbstractContextManager:
        """Around a backward pass: attention that it recomputes (recompute_activations) runs in
        the same precision as the forward pass it repeats."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return _bf16_attention(self.device.type)

    @property
    def precision(self) -> str:
        return "fp32" if self.autocast_dtype is None else "bf16"

    @property
    def pin_memory(self) -> bool:
        return self.device.type == "cuda"


@contextlib.contextmanager
def _autocast(device_type: str, dtype: torch.dtype):
    """Autocast in which attention, too, runs in `dtype` on the CPU. PyTorch's math attention
    (the path that supports attention dropout, so the one BERT trains on the CPU) upcasts bf16
    to fp32 unless fp16/bf16 reductions are allowed: the scores, softmax, dropout mask and
    weighted values then run and are saved for the backward pass in fp32. Allowed while
    autocast is on (and put back after), as GPU attention kernels compute them: on MiniLM at
    batch 32 and 128 tokens the saved activations drop from 915 to 645 MB, the step's peak RSS
    from 2,063 to 1,709 MiB, and a step takes 0.89-0.92x the time (BENCHMARKS.md section 1)."""
    with _bf16_attention(device_type), torch.autocast(device_type, dtype=dtype):
        yield


@contextlib.contextmanager
def _bf16_attention(device_type: str):
    """fp16/bf16 reductions allowed in math attention, on the CPU (see `_autocast`)."""
    allowed = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    # GPU attention runs its own kernels in bf16 already: the flag is the CPU's only
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(allowed or device_type == "cpu")
    try:
        yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(allowed)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX).

    There, bf16 autocast (fp32 master weights, as on GPUs) trains MiniLM about 1.6x faster than
    fp32; elsewhere bf16 is emulated and slower, so `auto` keeps fp32.
    """
    try:
        with open("/proc/cpuinfo") as info:
            flags = info.read()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def select_runtime(
    device: str = "auto", precision: str = "auto", num_threads: int | None = None
) -> Runtime:
    """Pick the device and precision; enable TF32 matmuls on CUDA (free speed on Ampere+).

    `auto` precision is bf16 autocast on CUDA GPUs and CPUs with native bf16, fp32 elsewhere.
    """
    if num_threads:
        torch.set_num_threads(num_threads)
    if device == "auto":
        if torch.cuda.is_available():
            device = "cuda"
        elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            device = "mps"
        else:
            device = "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            ["device: cuda was asked for but no CUDA GPU is visible; use device: auto"]
        )
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    if precision == "auto":
        if dev.type == "cuda":
            bf16_ok = torch.cuda.is_bf16_supported()
        else:
            bf16_ok = dev.type == "cpu" and cpu_has_native_bf16()
        precision = "bf16" if bf16_ok else "fp32"
    dtype = torch.bfloat16 if precision == "bf16" else None
    return Runtime(device=dev, autocast_dtype=dtype)
