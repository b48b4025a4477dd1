"""The cluster suite of `slurmlab verify` (docs/verify.md). A package, so that its modules are
imported as lab.verify.suite.* and a user's own test files (`--tests DIR`) may share their names."""
