"""Emitters: launch files (Slurm sbatch and Kubernetes Kubeflow PyTorchJob) for benchmarks,
and a priced training plan as Megatron-LM arguments (:mod:`gpuscale.export.megatron`).

Contract: :func:`render_launch` (spec, bench, nodes) -> :class:`LaunchFiles` rendered and
validated in memory; :func:`write_launch` writes them all or none.
"""

from __future__ import annotations

from gpuscale.export.launch import BENCHES, LaunchFiles, nccl_env, render_launch, write_launch

__all__ = ["BENCHES", "LaunchFiles", "nccl_env", "render_launch", "write_launch"]
