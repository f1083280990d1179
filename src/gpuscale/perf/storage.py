"""What storage costs a training run: checkpoints and reading the training data.

Checkpoints are periodic, not part of every step, so they are priced apart from the step
breakdown (which is what published per-step throughput measures) and amortised over the
steps between two checkpoints; time to train adds every stall they cause.

  checkpoint size   every parameter (all experts, MTP layers included) in 16-bit for the
                    model, plus Adam's fp32 master weight and two moments: 2 + 12 bytes a
                    parameter. BLOOM 176B's checkpoint is "329GB" of bf16 weights and
                    "2.3TB" with the optimizer states, in binary units (176.2 B x 2 bytes is
                    328 GiB), 14 bytes a parameter (bigscience/bloom model card).
  synchronous save  training waits while the whole checkpoint is written at the storage
                    system's aggregate write rate (each shard written once, by one of the
                    data-parallel replicas that hold it, as Megatron's distributed
                    checkpoint and PyTorch DCP do), no faster than the GPUs' host links
                    together move it off the GPUs (PCIe x16 at the lower of the GPU's and
                    the server's generation, or the catalog's NVLink-C2C share).
  asynchronous save training waits while the save is set up (:data:`ASYNC_SAVE_FIXED_S`:
                    the plan, its metadata exchange, staging) and each GPU copies its share
                    (size / GPUs) to host memory over its host link; the write drains from
                    host memory in the background and stalls the next save only if it is
                    still running then (Megatron ``--async-save``, PyTorch DCP
                    ``async_save``). Host memory must hold the staged copy; that is not
                    checked.
  reload            after a failure the checkpoint is read back at the storage's read rate,
                    capped by the host links as the write is, each byte once (a fully
                    parallel load; where every data-parallel replica reads the weights
                    itself, more).
  data loading      each step reads global batch x (sequence + 1) token ids, 2 bytes each
                    for a vocabulary under 65,500 ids, else 4 (Megatron's indexed dataset,
                    ``DType.optimal_dtype``); data-loader workers read the next step's
                    batch during the current one, so only reading slower than a step shows.
                    The figure is the step's unique data; stacks that read it on several
                    ranks (Megatron: the first and last pipeline stages, every context-
                    parallel rank) read a few times more.
  saves             one every ``ceil(interval / step)`` steps, and one at the end of the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscale.errors import InputError
from gpuscale.perf.plan import Workload
from gpuscale.perf.transformer import mtp_param_count, param_count
from gpuscale.spec.workload import given_as
from gpuscale.units import parse_duration

WEIGHT_BYTES = 2.0
"""The model's own 16-bit copy of each weight in a checkpoint."""
ADAM_STATE_BYTES = 12.0
"""Adam's fp32 master weight, first and second moments (4 bytes each) per parameter."""

PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
"""One direction of a x16 PCIe link, GB/s, by generation (PCI-SIG: 8, 16, 32, 64 GT/s a
lane; 128b/130b coding to Gen 5, FLIT mode at Gen 6)."""

ASYNC_SAVE_FIXED_S = 6.0
"""Seconds an asynchronous save holds training beyond copying the states to host memory:
PyTorch DCP's ``async_save`` took a 7B model's checkpoint down time from 148.8 s to 6.3 s
(IBM Research and PyTorch, "Reducing Model Checkpointing Times by Over 10x with PyTorch
Distributed Asynchronous Checkpointing", 2024), where the copy of its 98 GB of states over
the GPUs' host links takes well under a second: the rest is the save's set-up, paid each
time. Without it a save would cost milliseconds, and the best interval a save a minute."""

UINT16_VOCAB = 65500
"""Vocabularies below this size store token ids as uint16 (Megatron's indexed dataset)."""

MAX_INTERVAL_S = 1e10
"""Longest checkpoint interval taken (about 300 years): beyond any training run."""
MAX_INTERVAL_STEPS = 10**12


@dataclass(frozen=True)
class StoragePolicy:
    """How a run checkpoints and what its storage delivers (None: not priced)."""

    checkpoint_every_s: float | None = None
    """Wall-clock time between checkpoints (or ``checkpoint_every_steps``)."""
    checkpoint_every_steps: int | None = None
    """Steps between checkpoints (or ``checkpoint_every_s``)."""
    write_Bps: float | None = None
    """Aggregate write rate the storage system gives this job, bytes/s."""
    read_Bps: float | None = None
    """Aggregate read rate for the training data and checkpoint reloads, bytes/s."""
    asynchronous: bool = False
    """Saves staged to host memory and written in the background."""
    checkpoint_every_best: bool = False
    """Save at the interval with the highest goodput for the failure rate (resolved into
    ``checkpoint_every_steps`` per plan by ``TrainingEstimate.resolve_storage``)."""

    @property
    def checkpoints(self) -> bool:
        return (
            self.checkpoint_every_s is not None
            or self.checkpoint_every_steps is not None
            or self.checkpoint_every_best
        )

    def check(self) -> None:
        """Refuse a policy that cannot be priced: an interval without a write rate, a write
        rate without an interval, values out of range."""
        if self.checkpoints and self.write_Bps is None:
            raise InputError(
                "storage-write-bw",
                "(missing)",
                f"the storage's aggregate write rate ({given_as('storage_write_bw')}), e.g. "
                "200GB/s, to price the checkpoints",
            )
        if self.write_Bps is not None and not self.checkpoints:
            raise InputError(
                "checkpoint-every",
                "(missing)",
                f"how often the run saves ({given_as('checkpoint_every')}), e.g. 30min or "
                "500steps, to use the write rate",
            )
        for name, v in (("storage-write-bw", self.write_Bps), ("storage-read-bw", self.read_Bps)):
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise InputError(name, v, "a positive rate, e.g. 200GB/s")
        secs, steps = self.checkpoint_every_s, self.checkpoint_every_steps
        _check_interval("checkpoint-every", secs if secs is not None else steps, secs, steps)


def _check_interval(field: str, said: object, secs: float | None, steps: int | None) -> None:
    """Refuse an interval out of range, naming the value as ``said``."""
    if secs is not None and not 0 < secs <= MAX_INTERVAL_S:
        raise InputError(field, said, f"a time above 0 and at most {MAX_INTERVAL_S:g} s")
    if steps is not None and not 1 <= steps <= MAX_INTERVAL_STEPS:
        raise InputError(field, said, f"1 to {MAX_INTERVAL_STEPS:,} steps")


def parse_interval(text: str, field: str = "checkpoint-every") -> tuple[float | None, int | None]:
    """``"30min"``, ``"2h"``, ``"900s"`` (wall-clock seconds) or ``"500steps"`` (steps);
    ``"best"`` is read by the caller."""
    s = text.strip().lower().replace(" ", "")
    valid = "a time such as 30min, 2h or 900s, a step count such as 500steps, or best"
    for suffix in ("steps", "step"):
        if s.endswith(suffix):
            num = s.removesuffix(suffix)
            if not num.isdecimal():
                raise InputError(field, text, valid)
            _check_interval(field, text, None, int(num))
            return None, int(num)
    secs = parse_duration(s, field)  # a bare number: steps or seconds? neither
    if secs is None:
        raise InputError(field, text, valid)
    _check_interval(field, text, secs, None)
    return secs, None


def checkpoint_bytes(w: Workload) -> float:
    """Bytes of one full checkpoint: 16-bit weights plus Adam's fp32 states."""
    m = w.model
    params = param_count(m) + (mtp_param_count(m) if m.mtp_layers else 0)
    return float(params) * (WEIGHT_BYTES + ADAM_STATE_BYTES)


def host_link_Bps(w: Workload) -> float:
    """A GPU's link to host memory, one direction: the catalog's (NVLink-C2C on a
    superchip), else a PCIe x16 slot at the lower of the GPU's and the server's generation."""
    g = w.gpu
    if g.host_link_gb_per_s is not None:
        return g.host_link_gb_per_s * 1e9
    gen = min(g.pcie_gen, w.system.pcie_gen)
    return PCIE_X16_GBPS[min(max(gen, 3), 6)] * 1e9


@dataclass(frozen=True)
class StorageCost:
    """Storage's share of one plan's training time."""

    checkpoint_bytes: float
    checkpoint_write_s: float
    """Writing one checkpoint to storage (in the background when asynchronous)."""
    checkpoint_stall_s: float
    """What one checkpoint stops training for (the whole write when synchronous)."""
    checkpoint_wait_s: float
    """Of the stall, waiting for the previous background write to finish (asynchronous)."""
    checkpoint_every_steps: int
    checkpoint_interval_s: float
    """Training time between two saves (steps x the step with its exposed data loading)."""
    checkpoint_per_step_s: float
    """The stall spread over the steps between checkpoints."""
    checkpoint_reload_s: float | None
    """Reading a checkpoint back after a failure (None without a read rate)."""
    interval_below_step: bool
    """The asked interval is shorter than one step: the run saves every step."""
    data_bytes_per_step: float
    data_read_s: float | None
    """Reading a step's token ids (None without a read rate)."""
    data_exposed_s: float
    """Reading beyond what the step hides (0 while the read is faster than the step)."""
    checkpoint_sync_s: float = 0.0
    """What a synchronous save would stall training for: the whole write (with an
    asynchronous save, the set-up it saves is more than that on fast storage)."""

    @property
    def per_step_s(self) -> float:
        """Seconds storage adds to an average step."""
        return self.checkpoint_per_step_s + self.data_exposed_s

    def checkpoints_in(self, steps: int) -> int:
        """Checkpoints saved over ``steps`` steps: one every interval and one at the end."""
        if not self.checkpoint_every_steps:
            return 0
        return -(-steps // self.checkpoint_every_steps)


def storage_cost(w: Workload, step_s: float, gpus_used: int, policy: StoragePolicy) -> StorageCost:
    """Checkpoint and data-loading time of a plan whose step takes ``step_s`` seconds on
    ``gpus_used`` GPUs."""
    policy.check()
    vocab_bytes = 2.0 if w.model.vocab < UINT16_VOCAB else 4.0
    data_bytes = float(w.global_batch) * (w.seq_len + 1) * vocab_bytes
    read_s = data_bytes / policy.read_Bps if policy.read_Bps else None
    exposed = max(read_s - step_s, 0.0) if read_s is not None else 0.0
    step = step_s + exposed
    if not policy.checkpoints or policy.write_Bps is None:
        return StorageCost(
            0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, None, False, data_bytes, read_s, exposed
        )
    size = checkpoint_bytes(w)
    # every byte leaves (and comes back to) the GPUs over their host links, however fast
    # the storage
    host_Bps = gpus_used * host_link_Bps(w)
    reload_s = size / min(policy.read_Bps, host_Bps) if policy.read_Bps else None
    short = False
    if policy.checkpoint_every_steps is not None:
        every = policy.checkpoint_every_steps
    elif policy.checkpoint_every_best:
        raise ValueError("checkpoint_every_best is resolved into steps before pricing")
    else:
        # the step that reaches the interval saves
        wanted = policy.checkpoint_every_s or 0.0
        every = max(math.ceil(wanted / step - 1e-9), 1)
        short = wanted < step
    interval = every * step
    wait = 0.0
    sync_s = size / min(policy.write_Bps, host_Bps)
    write_s, stall = sync_s, sync_s
    if policy.asynchronous:
        copy_s = ASYNC_SAVE_FIXED_S + size / host_Bps
        # the write drains from host memory; the next save waits for it if it is not done
        write_s = size / policy.write_Bps
        wait = max(write_s - interval, 0.0)
        stall = copy_s + wait
    return StorageCost(
        size,
        write_s,
        stall,
        wait,
        every,
        interval,
        stall / every,
        reload_s,
        short,
        data_bytes,
        read_s,
        exposed,
        sync_s,
    )
