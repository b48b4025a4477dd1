"""Is hardware virtualisation usable, or must guests run under qemu's software emulation (TCG)?"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lab import settings


@dataclass(frozen=True)
class KvmStatus:
    usable: bool
    driver: str  # "kvm" or "qemu" (vagrant-libvirt's libvirt.driver)
    reason: str


def cpu_flags(cpuinfo: str) -> set[str]:
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def classify(*, dev_exists: bool, dev_rw: bool, flags: set[str], modules: str) -> KvmStatus:
    """Pure decision from observed facts (unit-tested)."""
    if not dev_exists:
        return KvmStatus(False, "qemu", "/dev/kvm does not exist")
    if "kvm_pvm" in modules.split():
        return KvmStatus(False, "qemu", "/dev/kvm belongs to a nested PVM hypervisor (kvm_pvm); guests hang with it")
    if not ({"vmx", "svm"} & flags):
        return KvmStatus(False, "qemu", "the CPU shows no vmx/svm flag")
    if not dev_rw:
        return KvmStatus(False, "qemu", "/dev/kvm is not readable and writable by this user")
    return KvmStatus(True, "kvm", "hardware virtualisation available")


def detect() -> KvmStatus:
    forced = settings.DRIVER.get()
    if forced:
        return KvmStatus(forced == "kvm", forced, f"forced by {settings.DRIVER.name}={forced}")
    dev = Path("/dev/kvm")
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    try:
        modules = " ".join(line.split()[0] for line in Path("/proc/modules").read_text().splitlines())
    except OSError:
        modules = ""
    return classify(
        dev_exists=dev.exists(),
        dev_rw=os.access(dev, os.R_OK | os.W_OK),
        flags=cpu_flags(cpuinfo),
        modules=modules,
    )
