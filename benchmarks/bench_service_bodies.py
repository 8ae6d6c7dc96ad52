"""What a study file in a POST body costs the REST service: parsing it, and answering a burst.

1. Parse time of a flat YAML body (the shape of a hostile body under the size limit) at 16 KiB
   (the YAML limit) and 42 KB: PyYAML's pure-Python safe loader, parsed twice as the service did
   before (an event pass for aliases and depth, then the loader), against
   `weightsearch.core.yamlio.load_yaml` (libyaml's event pass, then libyaml's loader). Median of 5.
2. A burst of 8 such bodies at once, each on its own connection, against a real
   `weightsearch serve` on loopback, while a thread polls /health: the slowest answer and the
   slowest /health.

    python benchmarks/bench_service_bodies.py
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import yaml

from weightsearch.core.yamlio import load_yaml

TOKEN = "bench"


def body(size: int) -> str:
    return "".join(f"setting_{i:05d}: value {i:05d}\n" for i in range(size // 27))


def pure_python_twice(text: str) -> None:
    for _ in yaml.parse(text, Loader=yaml.SafeLoader):
        pass
    yaml.load(text, Loader=yaml.SafeLoader)


def median_s(fn, text: str, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def serve(folder: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(folder, "server.log"), "w")  # noqa: SIM115 (open while it runs)
    proc = subprocess.Popen(
        [sys.executable, "-m", "weightsearch.cli", "serve", "--port", str(port), "--storage",
         f"sqlite:///{folder}/studies.db"], stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "WEIGHTSEARCH_TOKEN": TOKEN})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc, port
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit("the server did not come up")


def post(port: int, payload: bytes) -> tuple[int, float]:
    request = (b"POST /studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/yaml\r\n"
               b"Authorization: Bearer " + TOKEN.encode() +
               b"\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
    with socket.create_connection(("127.0.0.1", port)) as s:
        start = time.monotonic()
        s.sendall(request)
        head = s.recv(64)
        return int(head.split()[1]), time.monotonic() - start


def burst(port: int, payload: bytes) -> tuple[list[int], float, float]:
    health: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                start = time.monotonic()
                client.get(f"http://127.0.0.1:{port}/health")
                health.append(time.monotonic() - start)

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.2)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post(port, payload), range(8)))
    stop.set()
    poller.join()
    return [c for c, _ in answers], max(t for _, t in answers), max(health)


def main() -> None:
    print(f"libyaml available: {yaml.__with_libyaml__}")
    print(f"{'body':>8} {'pure Python x2 (s)':>19} {'load_yaml (s)':>14} {'speed-up':>9}")
    for size in (16_000, 42_000):
        text = body(size)
        slow, fast = median_s(pure_python_twice, text), median_s(load_yaml, text)
        print(f"{len(text):>8} {slow:>19.4f} {fast:>14.4f} {slow / fast:>8.1f}x")
    with tempfile.TemporaryDirectory() as folder:
        proc, port = serve(folder)
        try:
            for size in (16_000, 42_000):
                codes, slowest, health = burst(port, body(size).encode())
                print(f"burst of 8 x {size} B: answers {sorted(set(codes))}, slowest "
                      f"{slowest * 1000:.0f} ms; slowest /health meanwhile {health * 1000:.0f} ms")
        finally:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
