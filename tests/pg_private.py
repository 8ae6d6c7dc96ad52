"""A throwaway PostgreSQL cluster of the test session's own: `initdb` in a temporary folder, a
free port on 127.0.0.1, trust authentication, started once and removed at the end.

Tests never touch a server they did not start, unless WEIGHTSEARCH_TEST_PG names one: a
developer's own PostgreSQL on 5432 keeps its databases. Where the session runs as root (a
container, CI), the cluster runs as the `postgres` system user, since PostgreSQL refuses to
run as root.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import free_port

START_TIMEOUT_S = 120


def _tool(name: str) -> str | None:
    """`name` on PATH, else in Debian's versioned folder (/usr/lib/postgresql/<v>/bin)."""
    found = shutil.which(name)
    if found:
        return found
    versioned = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return versioned[-1] if versioned else None


def missing() -> str | None:
    """Why no private cluster can start here (with the fix), or None when one can."""
    if not (_tool("initdb") and _tool("pg_ctl")):
        return ("PostgreSQL's initdb and pg_ctl are not installed (Debian: `apt-get install "
                "postgresql`), or set WEIGHTSEARCH_TEST_PG to a server's admin URL")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return ("running as root, PostgreSQL needs a `postgres` system user to run as; "
                    "run the tests as another user or set WEIGHTSEARCH_TEST_PG")
    return None


class PrivateCluster:
    """One cluster in a temporary folder; `admin_url` is its superuser's `postgres` database."""

    def __init__(self) -> None:
        self._as_postgres = os.geteuid() == 0
        # Under root the postgres user must reach the folder: /tmp, not a private TMPDIR.
        self.root = Path(tempfile.mkdtemp(prefix="weightsearch-pg-",
                                          dir="/tmp" if self._as_postgres else None))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        try:
            if self._as_postgres:  # the cluster's own user must own its folder
                user = pwd.getpwnam("postgres")
                os.chown(self.root, user.pw_uid, user.pw_gid)
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                      "-E", "UTF8", "--no-sync", "--no-instructions")
            self.start()
        except BaseException:  # nothing left behind: no folder, no half-started server
            self.close()
            raise

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [_tool(tool) or tool, *args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=START_TIMEOUT_S, cwd=self.root)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{' '.join(command)} took over {START_TIMEOUT_S} s") from exc
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done

    def _pg_ctl(self, action: str, *extra: str, check: bool = True) -> None:
        # Its socket in its own folder, TCP on loopback only, no fsync: a throwaway cluster.
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c full_page_writes=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w",
                  "-t", str(START_TIMEOUT_S), action, *extra, check=check)

    def start(self) -> None:
        self._pg_ctl("start")

    def restart(self) -> None:
        """A clean restart (fast shutdown: sessions are cut), as a server's restart does."""
        self._pg_ctl("restart", "-m", "fast")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def close(self) -> None:
        self._pg_ctl("stop", "-m", "immediate", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
