"""`slurmlab serve` for a test session's boto3 client: the one already serving the lab's home, or one
started for the session (port 0: a free one; no rooms) and stopped with it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path


class Served:
    """`slurmlab serve` on the lab home `home`: started here (stopped by `stop`), or the one already
    running on that home (one serve per home: lab/api/server.py), which `stop` leaves alone."""

    def __init__(self, home: Path, rooms: bool = True, timeout: float = 60):
        self.home, self.proc, self.log = Path(home), None, None
        running = self._running()
        if running:
            self.url = running
            return
        self.log = open(self.home / "serve.log", "w")
        args = [sys.executable, "-m", "lab", "serve", "--provider", "vagrant", "--port", "0"]
        self.proc = subprocess.Popen([*args, *([] if rooms else ["--no-rooms"])], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        info = self.home / "serve.json"
        info.unlink(missing_ok=True)
        deadline = time.monotonic() + timeout
        while not info.exists() and self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"slurmlab serve did not start within {timeout:.0f} s: {self.home / 'serve.log'}")
            time.sleep(0.2)
        if self.proc.poll() is not None:
            raise RuntimeError(f"slurmlab serve exited {self.proc.returncode}: "
                               f"{(self.home / 'serve.log').read_text()[-2000:]}")
        time.sleep(0.3)  # serve.json is written as the socket listens; let a reader see it whole
        self.url = json.loads(info.read_text())["url"]

    def _running(self) -> str | None:
        """The URL of a serve that holds the home's lock now, if any."""
        from filelock import FileLock, Timeout

        info = self.home / "serve.json"
        if not info.exists():
            return None
        lock = FileLock(str(self.home / "serve.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            try:
                return json.loads(info.read_text())["url"]
            except (OSError, ValueError, KeyError):
                return None
        lock.release()
        return None

    def client(self):
        """A boto3 `sagemaker` client on this server (unsigned requests: any key will do)."""
        import boto3

        return boto3.client("sagemaker", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id="x", aws_secret_access_key="x")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None
