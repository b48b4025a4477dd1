from lab.host import kvm, mode


def test_kvm_missing_device_means_software_emulation():
    st = kvm.classify(dev_exists=False, dev_rw=False, flags={"vmx"}, modules="")
    assert (st.usable, st.driver) == (False, "qemu")


def test_kvm_pvm_module_is_not_usable():
    st = kvm.classify(dev_exists=True, dev_rw=True, flags={"vmx"}, modules="kvm_pvm kvm")
    assert not st.usable and "PVM" in st.reason


def test_kvm_without_cpu_flags_is_not_usable():
    st = kvm.classify(dev_exists=True, dev_rw=True, flags={"sse2"}, modules="kvm")
    assert not st.usable and "vmx/svm" in st.reason


def test_kvm_usable_with_flags_and_access():
    st = kvm.classify(dev_exists=True, dev_rw=True, flags={"svm", "sse2"}, modules="kvm_amd kvm")
    assert (st.usable, st.driver) == (True, "kvm")


def test_kvm_unwritable_device():
    st = kvm.classify(dev_exists=True, dev_rw=False, flags={"vmx"}, modules="kvm_intel")
    assert not st.usable and "writable" in st.reason


def test_cpu_flags_parse():
    assert "vmx" in kvm.cpu_flags("processor: 0\nflags\t\t: fpu vmx sse\n")


def test_mode_override(monkeypatch):
    monkeypatch.setenv("SLURMLAB_HOST_MODE", "systemd")
    assert not mode.uses_netns()
    monkeypatch.setenv("SLURMLAB_HOST_MODE", "netns")
    assert mode.uses_netns()
