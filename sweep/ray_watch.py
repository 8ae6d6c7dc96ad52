"""Noticing that the Ray cluster under a launch is gone.

When this machine's raylet dies (killed for memory, crashed) or the cluster's head (its GCS)
stops answering, Tune neither returns nor raises: it waits for resources that will never come
back, and Ray's own client gives up on the GCS only after a minute. `RayWatch` probes both
with a TCP connect every `period_s` from a thread while a round trains; after `misses` failed
probes in a row it stops the round the way Ctrl-C does (SIGINT to this process: Tune returns,
the live trials are recorded as interrupted, their leases released), and the launch ends with
`RayLost` and the command that continues the study. Should Tune not return within
`grace_s`, the process exits on its own (exit code `RayLost.exit_code`): its trials' leases
then lapse and any later driver continues them (`inspect` shows them as driver_gone meanwhile).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from typing import Any

from weightsearch.core.errors import ClusterError

PERIOD_S = 2.0
MISSES = 3  # probes in a row: one slow answer on a loaded machine is no lost cluster
GRACE_S = 30.0
CONNECT_TIMEOUT_S = 1.0


class RayLost(ClusterError):
    """The Ray cluster a launch ran on stopped answering; the study continues with `resume`."""

    exit_code = 3


def _endpoints() -> dict[str, tuple[str, int]]:
    """This machine's raylet and the cluster's GCS, as host and port (what Ray reports now)."""
    import ray

    context = ray.get_runtime_context()
    found: dict[str, tuple[str, int]] = {}
    host, _, port = context.gcs_address.rpartition(":")
    if host and port.isdigit():
        found["the cluster's head (GCS)"] = (host, int(port))
    me = context.get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == me and node.get("NodeManagerPort"):
            found["this machine's raylet"] = (node["NodeManagerAddress"],
                                              int(node["NodeManagerPort"]))
    return found


def answers(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class RayWatch:
    """A watch over one round (a context manager); `lost` names what stopped answering."""

    def __init__(self, study: str, period_s: float = PERIOD_S, misses: int = MISSES,
                 grace_s: float = GRACE_S) -> None:
        self.study, self.period_s, self.misses, self.grace_s = study, period_s, misses, grace_s
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._endpoints: dict[str, tuple[str, int]] = {}

    def __enter__(self) -> RayWatch:
        try:
            self._endpoints = _endpoints()
        except Exception:
            self._endpoints = {}
        if self._endpoints:
            self._thread = threading.Thread(target=self._watch, name="ray-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()

    def error(self, interrupted: int | None) -> RayLost:
        """`interrupted`: the cells recorded as interrupted; None where nothing could be
        recorded (their leases lapse instead)."""
        held = ("the cells it was training keep their checkpoints (their leases lapse within "
                "the claim lease)" if interrupted is None else
                f"the {interrupted} cell(s) it was training are recorded as interrupted and "
                "keep their checkpoints")
        return RayLost(
            f"the Ray cluster this launch ran on was lost ({self.lost} stopped answering); "
            f"{held}: run `weightsearch resume {self.study}` (with the same --storage) once "
            "Ray runs again, and it continues them")

    def _watch(self) -> None:
        missed: dict[str, int] = dict.fromkeys(self._endpoints, 0)
        while not self._stop.wait(self.period_s):
            for what, (host, port) in self._endpoints.items():
                missed[what] = 0 if answers(host, port) else missed[what] + 1
                if missed[what] >= self.misses:
                    self.lost = f"{what} at {host}:{port}"
                    self._stop_round()
                    return

    def _stop_round(self) -> None:
        """Ctrl-C's way out; the process's own if Tune does not take it."""
        os.kill(os.getpid(), signal.SIGINT)
        if self._stop.wait(self.grace_s):
            return
        sys.stderr.write(f"weightsearch launch: error: {self.error(None)}\n")
        sys.stderr.flush()
        os._exit(RayLost.exit_code)
