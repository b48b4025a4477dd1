"""The equivalence check of role templates (tests/e2e/equivalence.py): identity differences pass, any
other difference fails."""

from tests.e2e.equivalence import differences


def fp(cluster: str, *, key: str = "k1", extra_file: str = "", package: str = "slurmd 24.11.5-4",
       unit: str = "munge.service", mode: str = "755") -> str:
    return "\n".join([
        "## packages", package, "munge 0.5.16-1",
        "## enabled", unit, "ssh.service",
        "## active", "chrony.service", "home.automount",
        "## accounts", "root:0:0:/root:/bin/bash", "slurm:64030:64030:/nonexistent:/usr/sbin/nologin",
        "## groups", "root:0:", "munge:101:",
        "## files", f"{key}aaaa  /etc/munge/munge.key", f"{key}bbbb  /etc/hostname", "cccc  /etc/chrony/chrony.conf",
        *( [extra_file] if extra_file else []),
        "## modes", f"/var/lib/mysql/slurm_acct_db/{cluster}_job_table.ibd mysql mysql 660 f",
        f"/home root root {mode} d", "/var/lib/slurm/slurmd/cred_state root root 600 f",
    ]) + "\n"


def test_identity_and_the_cluster_name_are_not_differences():
    assert differences(fp("demo"), "demo", fp("plain", key="k2"), "plain") == {}


def test_a_package_a_unit_a_file_or_a_mode_more_is_a_difference():
    base = fp("demo")
    assert differences(base, "demo", fp("plain", package="slurmd 24.11.6-1"), "plain")["packages"] == [
        "- slurmd 24.11.5-4", "+ slurmd 24.11.6-1"]
    assert "enabled" in differences(base, "demo", fp("plain", unit="slurmctld.service"), "plain")
    assert differences(base, "demo", fp("plain", extra_file="dddd  /etc/exports"), "plain")["files"] == [
        "+ dddd  /etc/exports"]
    assert "modes" in differences(base, "demo", fp("plain", mode="700"), "plain")


def test_an_unread_fingerprint_is_a_difference():
    assert "fingerprint" in differences("", "demo", "", "plain")


def test_a_file_of_the_clusters_own_shape_is_identity_in_both_sections():
    gres = "eeee  /etc/slurm/gres.conf"
    a = fp("demo", extra_file=gres).replace("## modes\n", "## modes\n/etc/slurm/gres.conf root root 644 f\n")
    assert differences(a, "demo", fp("plain"), "plain") == {}
