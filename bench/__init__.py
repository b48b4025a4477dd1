"""Benchmarks: see bench/README.md. A package so that tests can import its pure helpers."""
