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

CELL = ('import pathlib, socket, subprocess\n'
        'pathlib.Path.home().joinpath("from-the-notebook.txt").write_text(socket.gethostname())\n'
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


LAUNCHER = '.jp-LauncherCard[data-category="Notebook"]'  # JupyterLab's "new notebook" card
EDITOR = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .cm-content"  # the new notebook's first cell
KERNEL = ("[...document.querySelectorAll('.jp-Notebook-ExecutionIndicator')]"
          ".map(e => e.getAttribute('data-status')).join(' ')")


OUTPUT = "[...document.querySelectorAll('.jp-OutputArea-output')].map(e => e.innerText).find(t => t.includes('srun:'))"
FIRST_PROMPT = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .jp-InputPrompt"  # "[ ]:", "[*]:" or "[1]:"


def _cell_output(b: Browser, timeout: float = 300.0) -> str:
    """The cell's output. A run that never started (its prompt still `[ ]:` after 90 s, the next cell made:
    the request was lost while the kernel's connection was reset, seen once on a slow machine) is asked for
    again, as a student would: Escape, the cell above, Shift+Enter."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return b.until(OUTPUT, max(1.0, min(90.0, deadline - time.monotonic())), "the cell's output", every=2)
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        try:
            prompt = (b.js(f"document.querySelector('{FIRST_PROMPT}')?.innerText ?? ''") or "").strip()
        except (AssertionError, TimeoutError):
            continue
        if prompt.startswith("[") and not prompt.strip("[]: "):  # "[ ]:": not running, never ran
            b.key("Escape", "Escape", 27)
            b.key("ArrowUp", "ArrowUp", 38)
            b.key("Enter", "Enter", 13, modifiers=8)


def _kernel_settled(b: Browser, checks: int = 4) -> None:
    """The kernel idle `checks` times in a row, 2 s apart: a new notebook's kernel says idle, then
    reconnects (connecting, unknown) once more under emulation, and what was typed before is lost."""
    deadline, row = time.monotonic() + 300, 0
    while row < checks:
        assert time.monotonic() < deadline, f"the kernel did not settle: {b.js(KERNEL)!r}"
        row = row + 1 if b.js(KERNEL) == "idle" else 0
        time.sleep(2)


def _log_in(b: Browser, url: str, user: str, password: str) -> None:
    b.go(url + "hub/login")
    b.until("document.querySelector('#username_input') !== null", 180, "the login form")
    b.js(f"""document.querySelector('#username_input').value = {json.dumps(user)};
             document.querySelector('#password_input').value = {json.dumps(password)};
             document.querySelector('#login_submit').click(); true""")


def student_session(name: str, password: str, on: Callable[[str, str], str], shots: Path, profile: Path) -> dict:
    """The whole session as user01; returns what it measured and saw (for the test's asserts and the docs).
    The waits are long: `make test` runs another stream of VMs beside this one, and Chromium, the hub and
    JupyterLab then share the two cores with them."""
    seen: dict = {}
    opened = Opened(name)
    b = Browser(profile, 1280, 860)
    try:
        url = opened.url
        _log_in(b, url, "user01", "not-the-password")
        b.until("document.body.innerText.includes('Invalid username or password')", 300, "the wrong password refused")
        seen["refused_at"] = b.url

        _log_in(b, url, "user01", password)
        b.until("!location.pathname.endsWith('/hub/login')", 300, "the login to go through")
        b.go(url + "hub/spawn")  # where the login leads too, unless a server of user01's is known
        b.until("document.querySelector('#spawn_form select[name=partition]') !== null", 300, "the spawn form")
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
        seen["squeue"] = on("login", "squeue -u user01")  # as docs/workshop.md shows it
        seen["running_s"] = time.monotonic() - t0
        b.until("location.pathname.includes('/user/user01/lab') && "
                "document.querySelector('[data-command=\"launcher:create\"]') !== null", 600, "JupyterLab", every=2)
        seen["ready_s"] = time.monotonic() - t0
        try:
            b.until(f"document.querySelector('{LAUNCHER}') !== null", 60, "JupyterLab's launcher")
        except AssertionError:  # Lab restored user01's last workspace (a notebook, no launcher): start afresh
            b.go(url + "user/user01/lab?reset")
            b.until(f"document.querySelector('{LAUNCHER}') !== null", 300, "JupyterLab's launcher")

        b.js(f"document.querySelector('{LAUNCHER}').click(); true")
        b.until(f"document.querySelector('{EDITOR}') !== null && document.querySelector('.jp-Notebook-ExecutionIndicator') "
                "!== null", 300, "a new notebook", every=2)
        _kernel_settled(b)
        for _ in range(3):  # text typed while the kernel's connection is reset is lost: type it again
            b.js(f"document.querySelector('{EDITOR}').focus(); true")
            b.type(CELL)
            time.sleep(3)
            if b.js(f"document.querySelector('{EDITOR}').innerText").strip() == CELL:
                break
            b.js(f"document.querySelector('{EDITOR}').focus(); document.execCommand('selectAll'); true")
            b.key("Delete", "Delete", 46)
            _kernel_settled(b)
        typed = b.js(f"document.querySelector('{EDITOR}').innerText")
        assert typed.strip() == CELL, typed
        b.key("Enter", "Enter", 13, modifiers=8)  # Shift+Enter: run the cell
        out = _cell_output(b)
        seen["output"] = out.strip()
        seen["home_file"] = on("login", "sudo -u user01 cat /home/user01/from-the-notebook.txt").strip()  # NFS squashes root
        b.screenshot(shots / "jupyterlab.png")

        b.go(url + "hub/home")
        b.until("document.querySelector('#stop') !== null", 180, "the hub's home page")
        b.js("document.querySelector('#stop').click(); true")
        # JupyterHub 5's home page: the stop button goes, "My Server" becomes "Start My Server"
        stopped = ("(document.querySelector('#stop')?.offsetParent ?? null) === null && "
                   "/Start/.test(document.querySelector('#start')?.innerText ?? '')")
        try:
            b.until(stopped, 300, "the server stopped", every=2)
        except AssertionError:  # the page said "API request failed (0): error" once (its request cut short):
            b.go(url + "hub/home")  # the home page again, and Stop again if the server still runs, as a student would
            b.until("document.querySelector('#start') !== null", 180, "the hub's home page")
            b.js("document.querySelector('#stop')?.offsetParent && document.querySelector('#stop').click(); true")
            b.until(stopped, 300, "the server stopped", every=2)
            seen["stop_asked_twice"] = True
        seen["stopped"] = True

        b.go(url + "hub/logout")
        b.until("document.querySelector('#username_input') !== null", 180, "the login page after logout")
        b.go(url + "hub/home")
        b.until("document.querySelector('#username_input') !== null", 180, "the login page (no session left)")
        seen["logged_out_at"] = b.url
    except BaseException:
        try:
            b.screenshot(shots / "jupyterlab-failed.png")
        except Exception:  # noqa: BLE001 - the failure itself is what matters
            pass
        raise
    finally:
        b.close()
        opened.stop()
    return seen
