"""Baseline matchers for the benchmark harness.

Every baseline follows one small protocol: ``build(subs)`` with ``subs`` a list of
``(id, core predicates)``; ``match(event) -> sorted list of ids``; ``subscribe(id, preds)``,
``subscribe_many(subs)``, ``unsubscribe(id)``, ``unsubscribe_many(ids)``; ``flush()`` (makes
queued updates visible; a no-op where updates are immediate); ``disk_bytes()``; ``close()``.
On-disk baselines also have ``data_files()``, ``open()`` (reopen after ``close``) and
``destroy()``.
"""

from __future__ import annotations

from typing import Any

BASELINES = ("scan", "counting-mem", "sqlite", "duckdb")


def make(name: str, workdir: str | None = None, **options: Any):
    """A fresh, unbuilt baseline by name; on-disk ones put their file in ``workdir``."""
    import os

    if name == "scan":
        from tools.baselines.scan import Scan

        return Scan()
    if name == "counting-mem":
        from tools.baselines.counting_mem import CountingMem

        return CountingMem()
    if name == "sqlite":
        from tools.baselines.sqlite import SQLiteBaseline

        path = os.path.join(workdir, "preds.sqlite") if workdir else None
        return SQLiteBaseline(path, **options)
    if name == "duckdb":
        from tools.baselines.duckdb_db import DuckDBBaseline

        path = os.path.join(workdir, "preds.duckdb") if workdir else None
        return DuckDBBaseline(path, **options)
    raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
