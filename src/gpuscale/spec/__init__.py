"""User-facing input schemas (workloads); pydantic only where input enters."""

from gpuscale.spec.workload import TrainingJob, load_training_job

__all__ = ["TrainingJob", "load_training_job"]
