"""Workloads mrbench replays: generated GSM8K-format problems and their scoring."""
