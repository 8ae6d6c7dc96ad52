"""The compose file and image recipe: valid Compose, real commands, offline and pinned."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT

DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
INSTALL_HINT = "docker-compose not on PATH; install it with `apt-get install -y docker-compose`"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _compose_config(token: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
    env["GLUE_DATA_DIR"] = str(ROOT / "data")
    if token is not None:
        env["RAY_AUTH_TOKEN"] = token
    return subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True, text=True,
        env=env, cwd=ROOT, timeout=60,
    )


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason=INSTALL_HINT)
def test_compose_config_is_valid_and_demands_a_token() -> None:
    if (DOCKER / ".env").exists():
        pytest.skip("docker/.env exists here; the token check would read it")
    ok = _compose_config("0" * 64)
    assert ok.returncode == 0, ok.stderr
    rendered = yaml.safe_load(ok.stdout)
    assert set(rendered["services"]) == {"postgres", "ray-head", "ray-worker", "launch"}
    missing = _compose_config(None)
    assert missing.returncode != 0
    assert "docker/.env" in missing.stderr


def _split_volume(volume: str) -> tuple[str, str]:
    """`SOURCE:TARGET[:MODE]` -> (source, target); the source may hold `${VAR:?message}`."""
    head, _, last = volume.rpartition(":")
    if last in ("ro", "rw"):
        head, _, last = head.rpartition(":")
    return head, last


def _host_path(service: dict, container_path: str) -> Path | None:
    """Where a container path lives on the host, through the service's bind mounts."""
    for volume in service.get("volumes", []):
        source, target = _split_volume(volume)
        if source.startswith((".", "/")) and container_path.startswith(target.rstrip("/") + "/"):
            return (DOCKER / source / container_path[len(target.rstrip("/")) + 1:]).resolve()
    return None


def _mounted(service: dict, container_path: str) -> bool:
    targets = [_split_volume(v)[1].rstrip("/") for v in service.get("volumes", [])]
    return any(container_path == t or container_path.startswith(t + "/") for t in targets)


def test_weightsearch_commands_parse_with_the_real_cli(compose: dict) -> None:
    from weightsearch.cli import build_parser

    parser = build_parser()
    commands = {name: s["command"] for name, s in compose["services"].items()
                if s.get("command", [""])[0] == "weightsearch"}
    assert "launch" in commands
    for name, command in commands.items():
        args = parser.parse_args(command[1:])  # exits (SystemExit) on an unknown subcommand/flag
        assert args.command == "launch", name
        assert args.ray_address == "ray-head:6379"
        study_file = _host_path(compose["services"][name], args.study_file)
        assert study_file is not None, f"{args.study_file} is not under a mounted folder"
        assert study_file.is_file(), f"service {name}: {study_file} does not exist in the repo"
        assert args.storage == compose["services"][name]["environment"]["WEIGHTSEARCH_STORAGE"]
        # The study's folders are mounted on every node (the same volumes, the same paths).
        study = yaml.safe_load(study_file.read_text())
        for path in (study["workdir"], study["train"]["data_dir"], study["train"]["cache_dir"]):
            for node in ("ray-head", "ray-worker", name):
                assert _mounted(compose["services"][node], path), f"{path} not mounted on {node}"


def test_ray_commands_parse_with_ray_cli(compose: dict) -> None:
    from ray.scripts.scripts import start

    services = compose["services"]
    for name in ("ray-head", "ray-worker"):
        command = services[name]["command"]
        assert command[:2] == ["ray", "start"], name
        ctx = start.make_context("start", list(command[2:]))  # click parses, nothing runs
        assert ctx.params["block"] is True
    assert services["ray-head"]["command"].count("--head") == 1
    assert "--port=6379" in services["ray-head"]["command"]
    assert "--address=ray-head:6379" in services["ray-worker"]["command"]


def test_every_node_authenticates_and_shares_the_runs_volume(compose: dict) -> None:
    for name in ("ray-head", "ray-worker", "launch"):
        service = compose["services"][name]
        env = service["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        assert env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?"), name
        assert env["WEIGHTSEARCH_STORAGE"] == (
            "postgresql+psycopg://weightsearch@postgres:5432/weightsearch"
        )
        assert any(v.startswith("runs:") for v in service["volumes"]), name
    gpus = compose["services"]["ray-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpus[0]["driver"] == "nvidia" and "gpu" in gpus[0]["capabilities"]
    postgres = compose["services"]["postgres"]
    assert re.fullmatch(r"postgres:15\.\d+", postgres["image"])
    assert "healthcheck" in postgres


def test_dockerfile_pins_cuda_torch_and_runs_offline_as_a_user() -> None:
    text = (DOCKER / "Dockerfile.gpu").read_text()
    base = re.search(r"^FROM (\S+)", text, re.MULTILINE).group(1)
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-cudnn-runtime-ubuntu\d+\.\d+", base)
    torch_at = text.index('pip install "torch==${TORCH_VERSION}" --index-url')
    package_at = text.index("/src")
    assert torch_at < package_at, "torch must be installed before the package"
    assert re.search(r"ARG TORCH_VERSION=\d+\.\d+\.\d+", text)
    assert "HF_HUB_OFFLINE=1" in text
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    for copied in re.findall(r"^COPY (?:--\S+ )?(.+?) \S+$", text, re.MULTILINE):
        for path in copied.split():
            assert (ROOT / path).exists(), f"Dockerfile copies {path}, which is missing"
    for line in (DOCKER / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.]+", line), line


def test_entrypoint_is_valid_shell() -> None:
    script = DOCKER / "entrypoint.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
