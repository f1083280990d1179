"""gpuscale: find the GPU-cluster architecture that turns GPUs into compute workloads can use."""

__version__ = "0.1.0"
