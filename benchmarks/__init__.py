"""Benchmarks for persched against APScheduler 3.11 and the store's own ceiling.

Each workload is a module that prints one JSON line per measurement; `run.py`
runs them in fresh subprocesses and prints a markdown table. See README.md.
"""

from __future__ import annotations
