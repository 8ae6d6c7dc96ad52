"""A run gives the memory it freed back to the system between phases (`trainer.memory`): glibc
would otherwise keep it in its heap, and the RSS a run reaches in its first epoch would stay."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

# 100 blocks of 4 MiB (an activation's size), each followed by a small block that stays alive,
# as a training step leaves them; then the big ones are freed. A 4 MiB block freed first raises
# glibc's mmap threshold, as the first steps of a run do, so the blocks come from the heap.
_HELD = """
import sys, numpy as np
from trainer.memory import give_back
def rss():
    lines = open('/proc/self/status').read().splitlines()
    return next(int(l.split()[1]) for l in lines if l.startswith('VmRSS')) / 1024
x = np.ones((4 << 20) // 8); del x
base = rss()
blocks, pins = [], []
for _ in range(100):
    blocks.append(np.ones((4 << 20) // 8)); pins.append(np.ones(64))
del blocks
if sys.argv[1] == 'on':
    assert give_back()
print(round(rss() - base))
"""


def _held_mib(setting: str) -> int:
    out = subprocess.run([sys.executable, "-c", _HELD, setting], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    return int(out.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator (Linux)")
def test_freed_heap_memory_goes_back_to_the_system():
    assert _held_mib("off") > 300  # glibc's default keeps most of the 400 MiB
    assert _held_mib("on") < 40
