"""``LocalEvalServer``: run an eval server as a child process on loopback, for apps and tests.

::

    with LocalEvalServer(devices="cpu", workers=2) as server:     # or: async with ...
        async with EvalClient(server.url) as client: ...

The server is a real ``python -m forge_kernels.eval.service`` process (its own session, so it and
its zygotes stop together); it exits by itself if this process dies (``--parent-pid``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from forge_kernels.eval.service.models import ServerConfig

__all__ = ["LocalEvalServer"]

_ROOT = str(Path(__file__).resolve().parents[3])


class LocalEvalServer:
    """An eval server subprocess bound to loopback; ``.url`` once started.

    ``devices``: ``"cpu"`` or GPU indices (``"0,1"`` or ``[0, 1]``); ``workers``: CPU workers
    (``devices="cpu"`` only); ``settings``: any other :class:`ServerConfig` field
    (``queue_limit=64``, ``eval_deadline_s=30``, ...). ``wait_for``: ``"ok"`` waits until every
    worker is ready, ``"listening"`` only until the port answers.
    """

    def __init__(self, devices: str | Sequence[int] = "cpu", port: int = 0, workers: int = 1, *,
                 host: str = "127.0.0.1", token: str | None = None, startup_timeout_s: float = 180.0,
                 wait_for: str = "ok", env: dict[str, str] | None = None, **settings: Any) -> None:
        device_spec = devices if isinstance(devices, str) else ",".join(str(d) for d in devices)
        if wait_for not in ("ok", "listening"):
            raise ValueError(f"wait_for must be 'ok' or 'listening', got {wait_for!r}")
        # validate here so a bad setting fails in the caller, not in a child's stderr
        self.config = ServerConfig(host=host, port=port, devices=device_spec, cpu_workers=workers, token=token,
                                   **settings)
        self.startup_timeout_s = startup_timeout_s
        self.wait_for = wait_for
        self.env = env
        self.url: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.log_path: str | None = None

    def _argv(self, ready_file: str) -> list[str]:
        argv = [sys.executable, "-m", "forge_kernels.eval.service", "--ready-file", ready_file,
                "--parent-pid", str(os.getpid())]
        for name, value in self.config.model_dump(exclude_defaults=True).items():
            if name == "devices":
                value = value if isinstance(value, str) else ",".join(str(d) for d in value)
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                argv += [flag] if value else []
            else:
                argv += [flag, str(value)]
        if "devices" not in self.config.model_fields_set:
            argv += ["--devices", "cpu"]
        return argv

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> "LocalEvalServer":
        """Start the process and wait until it is ready (see ``wait_for``)."""
        if self.process is not None:
            raise RuntimeError(f"server already started at {self.url}")
        self._dir = tempfile.TemporaryDirectory(prefix="fk-eval-server-")
        ready = os.path.join(self._dir.name, "url")
        self.log_path = os.path.join(self._dir.name, "server.log")
        env = dict(self.env if self.env is not None else os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self._argv(ready), env=env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            while not os.path.exists(ready):
                self._check_alive(deadline)
                time.sleep(0.05)
            self.url = Path(ready).read_text().strip()
            headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
            with httpx.Client(timeout=5.0, headers=headers) as http:
                while True:
                    self._check_alive(deadline)
                    try:
                        status = http.get(self.url + "/v1/health").json()["status"]
                        if self.wait_for == "listening" or status == "ok":
                            return self
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.1)
        except BaseException:
            self.stop()
            raise

    def _check_alive(self, deadline: float) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"eval server exited with code {self.process.returncode} while starting:\n"
                               f"{self.log_tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"eval server not ready within {self.startup_timeout_s} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's combined stdout/stderr."""
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        return Path(self.log_path).read_text(errors="replace")[-chars:]

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (graceful: zygotes closed), then SIGKILL the whole process group."""
        proc, self.process = self.process, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def kill(self) -> None:
        """SIGKILL the server at once (and its process group): a crash, for fault tests."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def __enter__(self) -> "LocalEvalServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> "LocalEvalServer":
        import asyncio

        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        import asyncio

        await asyncio.to_thread(self.stop)
