"""The suite's fixtures for a run of this folder by hand (`python -m pytest lab/verify/suite ...`):
they live in the plugin fixtures.py, which `slurmlab verify` loads with `-p` for every test path."""

pytest_plugins = ["lab.verify.suite.fixtures"]
