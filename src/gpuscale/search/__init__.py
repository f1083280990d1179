"""Searches: the parallelism plans of a training workload, and its scaling over GPU counts."""
