"""Searches: parallelism plans for a workload, cluster designs for a set of workloads."""
