"""gpuscale: find the GPU-cluster architecture that turns GPUs into compute workloads can use."""

from importlib.metadata import version

__version__ = version("gpuscale")  # pyproject.toml's, as installed
