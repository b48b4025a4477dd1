"""lab/workspace.py: a cluster's folder."""

from lab.workspace import ClusterDir


def test_remove_wins_against_a_writer_that_puts_a_file_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path))
    cd = ClusterDir("c")
    cd.create()
    (cd.logs / "a.log").write_text("x")
    real_rmtree = __import__("shutil").rmtree
    calls = []

    def rmtree_then_a_late_writer(path, ignore_errors=False):
        real_rmtree(path, ignore_errors=ignore_errors)
        if not calls:  # the room's last line, written just as the folder went
            path.mkdir()
            (path / "room.log").write_text("closed\n")
        calls.append(path)

    monkeypatch.setattr("lab.workspace.shutil.rmtree", rmtree_then_a_late_writer)
    cd.remove()
    assert not cd.root.exists()
    assert len(calls) == 2


def test_remove_of_a_missing_folder_is_quiet(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path))
    ClusterDir("never").remove()
    assert not ClusterDir("never").root.exists()
