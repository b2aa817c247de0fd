"""Workload generators, benchmark harness and baselines for pbtree (not part of the library)."""
