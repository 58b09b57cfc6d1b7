"""Helpers the tests (and benchmarks/bench_runner.py) share: a tiny random-weight Llama,
the runner workload the parity tests compare, and a target whose engines crash on purpose.
Importable because tests/ is on sys.path under pytest (tests/conftest.py's folder); never
part of the installed package."""
