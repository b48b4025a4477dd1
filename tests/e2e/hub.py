"""A student's JupyterHub session in headless Chromium (issue 31), through `slurmlab open`: a wrong
password refused, the right one lets in, the spawn form's request becomes the student's Slurm job,
JupyterLab opens, a notebook cell writes to the student's home and runs `srun hostname`, stopping the
server ends the job, logging out ends the session."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.browser import Browser

CELL = ('import pathlib, socket, subprocess; pathlib.Path.home().joinpath("from-the-notebook.txt")'
        '.write_text(socket.gethostname()); '
        'print("srun:", subprocess.run(["srun", "hostname"], capture_output=True, text=True).stdout.strip())')


class Opened:
    """`slurmlab open NAME --no-browser --output json`, running until stop()."""

    def __init__(self, name: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "lab", "open", name, "--no-browser", "--output", "json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        text = ""
        for line in self.proc.stdout:  # one indented object, then the forward runs on
            text += line
            if line.startswith("}"):
                break
        self.info = json.loads(text or "{}")
        assert self.info.get("Url", "").startswith("http://127.0.0.1:"), (self.info, self.proc.poll(),
                                                                          self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.url = self.info["Url"]  # http://127.0.0.1:PORT/NAME/

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        assert self.proc.returncode == 0, self.proc.stderr.read()[-2000:]


def _log_in(b: Browser, url: str, user: str, password: str) -> None:
    b.go(url + "hub/login")
    b.until("document.querySelector('#username_input') !== null", 60, "the login form")
    b.js(f"""document.querySelector('#username_input').value = {json.dumps(user)};
             document.querySelector('#password_input').value = {json.dumps(password)};
             document.querySelector('#login_submit').click(); true""")


def student_session(name: str, password: str, on: Callable[[str, str], str], shots: Path, profile: Path) -> dict:
    """The whole session as user01; returns what it measured and saw (for the test's asserts and the docs)."""
    seen: dict = {}
    opened = Opened(name)
    b = Browser(profile, 1280, 860)
    try:
        url = opened.url
        _log_in(b, url, "user01", "not-the-password")
        b.until("document.body.innerText.includes('Invalid username or password')", 120, "the wrong password refused")
        seen["refused_at"] = b.url

        _log_in(b, url, "user01", password)
        b.until("document.querySelector('#spawn_form select[name=partition]') !== null", 120, "the spawn form")
        seen["partitions"] = b.js("[...document.querySelectorAll('#spawn_form option')].map(o => o.value)")
        t0 = time.monotonic()
        b.js("document.querySelector('#spawn_form [type=submit]').click(); true")
        job = ""
        while not job:  # the notebook's job, as user01's, in squeue on the login node
            rows = on("login", "squeue -h -u user01 -o '%i|%j|%T|%N'").split()
            job = next((r for r in rows if "|RUNNING|" in r), "")
            assert time.monotonic() - t0 < 600, f"no running job of user01 in squeue: {rows}"
            time.sleep(3)
        seen["job"] = job.split("|")
        seen["running_s"] = time.monotonic() - t0
        b.until("location.pathname.includes('/user/user01/lab') && "
                "document.querySelector('.jp-LauncherCard[data-category=\"Notebook\"]') !== null",
                600, "JupyterLab's launcher", every=2)
        seen["ready_s"] = time.monotonic() - t0

        b.js("document.querySelector('.jp-LauncherCard[data-category=\"Notebook\"]').click(); true")
        b.until("document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .cm-content') !== null "
                "&& document.querySelector('.jp-Notebook-ExecutionIndicator, .jp-KernelStatus') !== null",
                300, "a new notebook", every=2)
        b.until("[...document.querySelectorAll('.jp-KernelStatus, .jp-Notebook-ExecutionIndicator')]"
                ".some(e => /Idle/i.test(e.innerText + ' ' + (e.getAttribute('title') || '') + ' ' + "
                "(e.getAttribute('data-status') || '')))", 300, "the kernel to be idle", every=2)
        b.js("document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .cm-content').focus(); true")
        b.type(CELL)
        typed = b.js("document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .cm-content').innerText")
        assert typed.strip() == CELL, typed
        b.key("Enter", "Enter", 13, modifiers=8)  # Shift+Enter: run the cell
        out = b.until("[...document.querySelectorAll('.jp-OutputArea-output')].map(e => e.innerText)"
                      ".find(t => t.includes('srun:'))", 300, "the cell's output", every=2)
        seen["output"] = out.strip()
        seen["home_file"] = on("login", "sudo cat /home/user01/from-the-notebook.txt").strip()
        b.screenshot(shots / "jupyterlab.png")

        b.go(url + "hub/home")
        b.until("document.querySelector('#stop') !== null", 60, "the hub's home page")
        b.js("document.querySelector('#stop').click(); true")
        b.until("document.querySelector('#start') !== null && getComputedStyle(document.querySelector('#start')).display !== 'none'",
                300, "the server stopped", every=2)
        seen["stopped"] = True

        b.go(url + "hub/logout")
        b.until("document.querySelector('#username_input') !== null", 60, "the login page after logout")
        b.go(url + "hub/home")
        b.until("document.querySelector('#username_input') !== null", 60, "the login page (no session left)")
        seen["logged_out_at"] = b.url
    except BaseException:
        try:
            b.screenshot(shots / "jupyterlab-failed.png")
            seen["page"] = b.text()[-3000:]
        except Exception:  # noqa: BLE001 - the failure itself is what matters
            pass
        raise
    finally:
        b.close()
        opened.stop()
    return seen
