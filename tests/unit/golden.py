"""Golden files of the unit tests: how each is rendered, the comparison, the regeneration.

Tests only compare (`assert_matches`): they never write a golden file. Regenerate them with

    make golden        # or: .venv/bin/python -m tests.unit.golden

then review `git diff tests/unit/data` and commit the change with the change that caused it.
"""

import difflib
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).parent / "data"
REGENERATE = "make golden (or: python -m tests.unit.golden), then review git diff tests/unit/data"


def vagrantfile():
    """tests/unit/data/Vagrantfile.golden: the Vagrantfile of test_vagrantfile's sample cluster."""
    from tests.unit.test_vagrantfile import _render

    return _render()


def slurm_conf():
    """tests/unit/data/slurm.conf.golden: slurm.conf of the sample inventory, rendered by ansible-core."""
    from tests.unit.test_roles import render_templates

    with tempfile.TemporaryDirectory(prefix="slurmlab-golden-") as tmp:
        return (render_templates(Path(tmp)) / "sample" / "slurm.conf").read_text()


GOLDEN = {
    "Vagrantfile.golden": vagrantfile,
    "slurm.conf.golden": slurm_conf,
}


def assert_matches(name, text):
    """Fail with a unified diff (golden -> rendered) and the regeneration command."""
    path = DATA / name
    if not path.exists():
        raise AssertionError(f"golden file {path} is missing: {REGENERATE}")
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(keepends=True), text.splitlines(keepends=True),
                                            fromfile=f"{name} (golden)", tofile=f"{name} (rendered now)"))
        raise AssertionError(f"the rendering differs from {path}:\n{diff}\n"
                             f"If the change is intended: {REGENERATE}")


def main(names):
    for name in names or sorted(GOLDEN):
        if name not in GOLDEN:
            sys.exit(f"unknown golden file {name!r}: one of {', '.join(sorted(GOLDEN))}")
        path = DATA / name
        text = GOLDEN[name]()
        old = path.read_text() if path.exists() else None
        if old == text:
            print(f"{path}: unchanged")
        else:
            path.write_text(text)
            print(f"{path}: written ({'new' if old is None else 'changed'}); review: git diff {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
