"""Training estimates: memory, step time, throughput and MFU for plans (the model facade)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpuscale.calibrate import Calibration
from gpuscale.ops.reliability import FailurePolicy, Reliability, reliability
from gpuscale.perf.memory import MEMORY_PARTS, MemoryBreakdown, memory_breakdown
from gpuscale.perf.plan import RECOMPUTE, FloatArrayT, Plans, Workload
from gpuscale.perf.recompute import recompute_flops_per_token
from gpuscale.perf.sharding import ShardGroups
from gpuscale.perf.step import StepBreakdown, step_breakdown
from gpuscale.perf.storage import StorageCost, StoragePolicy, storage_cost
from gpuscale.perf.training_notes import PlanNotes, _run_notes
from gpuscale.perf.transformer import active_param_count, model_flops_per_token, param_count
from gpuscale.perf.validity import validity

FloatArray = FloatArrayT


@dataclass(frozen=True)
class TrainingEstimate(PlanNotes):
    """Predictions for many plans of one workload (arrays aligned with ``plans``)."""

    workload: Workload
    plans: Plans
    memory: MemoryBreakdown
    step: StepBreakdown
    step_s: FloatArray
    tokens_per_s_per_gpu: FloatArray
    model_tflops_per_gpu: FloatArray
    mfu: FloatArray
    cal: Calibration | None = None
    """The constants the figures were computed with (for the notes' what-ifs)."""

    def _step_at(self, i: int, frac: float) -> tuple[float, float] | None:
        if self.cal is None:
            return None
        one = self.plans.take(np.array([i]))
        step = step_breakdown(self.workload, one, self.cal, np.array([frac]))
        return float(step.step_s[0]), float(self.step_s[i])

    def _priced_as(self, i: int, w: Workload) -> tuple[float, bool] | None:
        if self.cal is None:
            return None
        if w is self.workload:  # priced already
            return float(self.step_s[i]), bool(self.memory.fits[i])
        one = self.plans.take(np.array([i]))
        if not validity(w, one)[0][0]:
            return None
        mem = memory_breakdown(w, one, self.cal)
        step = step_breakdown(w, one, self.cal, mem.recompute_fraction)
        return float(step.step_s[0]), bool(mem.fits[0])

    def _memory_bytes(self, i: int) -> dict[str, int]:
        """Plan ``i``'s memory per GPU in whole bytes, the total the sum of its parts."""
        mem = self.memory
        out = {k: round(float(getattr(mem, k)[i])) for k in MEMORY_PARTS}
        return {**out, "total": sum(out.values()), "capacity": round(float(mem.capacity))}

    def _stages(self, i: int) -> dict[str, int | bool]:
        """Plan ``i``'s layers on its fullest stage without the output layer, on its last
        and on its slowest pipeline stage."""
        st = self.plan_stages(i)
        return {
            "fullest": int(st.fullest[0]),
            "last": int(st.last[0]),
            "slowest": int(st.slowest[0]),
            "slowest_runs_output_layer": bool(st.head[0]),
        }

    def storage(self, i: int, policy: StoragePolicy) -> StorageCost:
        """What checkpoints and data loading add to plan ``i``'s training time."""
        return storage_cost(
            self.workload, float(self.step_s[i]), int(self.plans.gpus_used()[i]), policy
        )

    def resolve_storage(
        self, i: int, policy: StoragePolicy, failures: FailurePolicy | None
    ) -> StoragePolicy:
        """``policy`` with a best interval (``checkpoint_every_best``) turned into plan
        ``i``'s step count of highest goodput under ``failures``; else ``policy`` itself."""
        if not policy.checkpoint_every_best or failures is None:
            return policy
        trial = replace(policy, checkpoint_every_best=False, checkpoint_every_steps=1)
        best = self.reliability(i, trial, self.storage(i, trial), failures).optimal_every_steps
        return replace(trial, checkpoint_every_steps=best)

    def reliability(
        self, i: int, storage: StoragePolicy, cost: StorageCost, failures: FailurePolicy
    ) -> Reliability:
        """Goodput of plan ``i`` saving as ``storage`` says (``cost`` at its interval), with
        the cluster failing as ``failures``; other intervals are priced for the best one."""
        w = self.workload
        used = int(self.plans.gpus_used()[i])
        step = float(self.step_s[i])

        def save(n: int) -> tuple[float, float]:
            at = replace(storage, checkpoint_every_s=None, checkpoint_every_steps=n)
            c = storage_cost(w, step, used, at)
            return c.checkpoint_stall_s, c.checkpoint_write_s if storage.asynchronous else 0.0

        return reliability(
            failures,
            used,
            step,
            cost.checkpoint_every_steps,
            save,
            cost.checkpoint_reload_s,
            cost.data_exposed_s,
        )

    def summary(
        self,
        i: int = 0,
        train_tokens: float | None = None,
        storage: StoragePolicy | None = None,
        failures: FailurePolicy | None = None,
    ) -> dict[str, Any]:
        """A JSON-ready description of plan ``i``: plan, memory and step breakdowns, rates;
        with ``storage``, what checkpoints and data loading add; with ``failures`` too, the
        goodput and the time failures add."""
        out: dict[str, Any] = {**self._plan_summary(i), **self._rates_summary(i)}
        notes = self.notes(i)
        if notes:
            out["notes"] = notes
        best_asked = storage is not None and storage.checkpoint_every_best
        if storage is not None:
            storage = self.resolve_storage(i, storage, failures)
        cost = self.storage(i, storage) if storage is not None else None
        if cost is not None and storage is not None:
            out["storage"] = _storage_summary(cost, storage, best_asked)
        rel = None
        if failures is not None:
            if cost is None or storage is None or not cost.checkpoint_every_steps:
                failures.check(checkpoints=False)  # refused: nothing to restart from
            else:
                rel = self.reliability(i, storage, cost, failures)
                out["reliability"] = _reliability_summary(rel)
        run_notes = _run_notes(cost, storage, rel)
        if run_notes:
            out.setdefault("notes", []).extend(run_notes)
        out |= self._time_to_train(i, train_tokens, cost, rel)
        return out

    def _plan_summary(self, i: int) -> dict[str, Any]:
        """Plan ``i``'s workload, its plan and the settings it runs with, its pipeline
        stages and its memory per GPU (:meth:`summary`'s first keys, in the order it lists
        them)."""
        w = self.workload
        used = int(self.plans.gpus_used()[i])
        groups = ShardGroups.of(w, self.plans.take(np.array([i])))  # this plan's alone
        return {
            "model": w.model.key,
            # parameters as the model line prints them (embeddings included; MTP depths apart)
            "parameters": param_count(w.model),
            "active_parameters": active_param_count(w.model),
            "gpu": w.gpu.key,
            "system": w.system.key,
            "gpus": w.num_gpus,
            "gpus_used": used,
            "seq_len": w.seq_len,
            "global_batch": w.global_batch,
            "precision": w.precision,
            "plan": self.plans.row(i),
            # the modules a selective plan recomputes; none for the other modes
            "recompute_modules": list(w.recompute_modules)
            if int(self.plans.recompute[i]) == RECOMPUTE.index("selective")
            else [],
            "recompute_fraction": float(self.memory.recompute_fraction[i]),
            "ep_dispatch": w.ep_dispatch,
            "grad_accumulation": w.grad_accumulation,
            "pp_p2p": w.pp_p2p,
            "cp_comm": w.cp_exchange,
            "fp8_param_gather": w.fp8_param_gather,
            "cuda_graphs": w.cuda_graphs,
            # layers on the fullest stage without the output layer, on the last (beside
            # it) and on the slowest
            "pipeline_stages": self._stages(i),
            "loss": w.loss_kind,
            "memory_headroom": w.memory_headroom,
            # the hybrid shard group this plan runs with (its own or the workload's), 0 when
            # it keeps one copy of its states (full sharding)
            "shard_group": int(groups.dense[0]) if groups.dense_replicas[0] > 1 else 0,
            "microbatches": int(self.plans.microbatches(w)[i]),
            "memory_bytes": self._memory_bytes(i),
            "fits": bool(self.memory.fits[i]),
        }

    def _rates_summary(self, i: int) -> dict[str, Any]:
        """Plan ``i``'s step time, term by term, its throughput, model and hardware FLOPs and
        MFU, and the peaks MFU is read against."""
        w = self.workload
        return {
            "step_time_breakdown_s": {k: float(v[i]) for k, v in self.step.terms().items()},
            "step_time_s": float(self.step_s[i]),
            "tokens_per_s_per_gpu": float(self.tokens_per_s_per_gpu[i]),
            "model_tflops_per_gpu": float(self.model_tflops_per_gpu[i]),
            # the count behind model TFLOP/s and MFU: 3 x the forward's FLOPs a token (its
            # GEMMs, the output layer's included, and causal attention), no recomputation
            "model_flops_per_token": model_flops_per_token(w.model, w.seq_len, causal=True),
            # hardware FLOPs: the model's and what recomputation runs again (Megatron's
            # "TFLOP/s per GPU" under recomputation counts these)
            **_hardware_flops(self, i),
            "mfu": float(self.mfu[i]),
            # the peak MFU is taken of: the dense peak of the run's precision
            "mfu_peak_tflops": w.gpu.peak_flops(w.precision) / 1e12,
            # the best a GEMM reaches on this GPU (BF16 MAMF / peak): an MFU's real ceiling
            "gpu_bf16_matmul_ceiling": float(w.gpu.matmul_eff),
        }

    def _time_to_train(
        self,
        i: int,
        train_tokens: float | None,
        cost: StorageCost | None,
        rel: Reliability | None,
    ) -> dict[str, Any]:
        """Plan ``i``'s run over ``train_tokens``: whole steps, the checkpoints saved
        (``cost``), the failures met (``rel``), wall time and GPU-hours; every key null
        without a token count, and the times null for a plan that does not fit or a run
        that failures never let finish."""
        # the keys are there whether or not a token count is given (null without one)
        out: dict[str, Any] = dict.fromkeys(
            (
                "train_steps",
                "train_tokens",
                "time_to_train_s",
                "gpu_hours",
                "gpu_hours_allocated",
                "checkpoints",
                "failures",
            )
        )
        if train_tokens is None:
            return out
        w = self.workload
        used = int(self.plans.gpus_used()[i])
        # a plan that does not fit trains nothing: no time is given for it
        fits = bool(self.memory.fits[i])
        # whole steps: the last one runs in full even when it is not needed in full
        tokens_per_step = float(w.global_batch) * w.seq_len
        steps = max(math.ceil(train_tokens / tokens_per_step - 1e-9), 1)
        secs = steps * float(self.step_s[i])
        if cost is not None:
            saves = cost.checkpoints_in(steps)
            secs += saves * cost.checkpoint_stall_s + steps * cost.data_exposed_s
            out["checkpoints"] = saves
        ok = fits
        if rel is not None:
            # failures stretch the run: of each second, this share is lost to them; a
            # run that fails before it saves and restarts never ends
            left = 1.0 - rel.failure_share
            ok = fits and left > 0.0
            secs = secs / left if left > 0.0 else math.inf
            out["failures"] = rel.failures_in(secs) if ok else None
        out["train_steps"] = steps
        out["train_tokens"] = train_tokens
        out["time_to_train_s"] = float(secs) if ok else None
        out["gpu_hours"] = float(secs * used / 3600.0) if ok else None
        # what a cluster of all the GPUs bills: idle ones too
        out["gpu_hours_allocated"] = float(secs * w.num_gpus / 3600.0) if ok else None
        return out


def _storage_summary(cost: StorageCost, storage: StoragePolicy, best_asked: bool) -> dict[str, Any]:
    """What checkpoints (saved as ``storage`` says, at a best interval where
    ``best_asked``) and data loading cost a plan: :meth:`TrainingEstimate.summary`'s
    ``storage``."""
    return {
        "checkpoint_bytes": cost.checkpoint_bytes,
        "checkpoint_write_s": cost.checkpoint_write_s,
        "checkpoint_stall_s": cost.checkpoint_stall_s,
        "checkpoint_wait_s": cost.checkpoint_wait_s,
        "checkpoint_sync_stall_s": cost.checkpoint_sync_s,
        "checkpoint_every_steps": cost.checkpoint_every_steps,
        "checkpoint_interval_s": cost.checkpoint_interval_s,
        "checkpoint_asynchronous": storage.asynchronous,
        "checkpoint_every_best": best_asked,
        "checkpoint_per_step_s": cost.checkpoint_per_step_s,
        "checkpoint_reload_s": cost.checkpoint_reload_s,
        "checkpoint_interval_below_step": cost.interval_below_step,
        "data_bytes_per_step": cost.data_bytes_per_step,
        "data_read_s": cost.data_read_s,
        "data_exposed_s": cost.data_exposed_s,
    }


def _reliability_summary(rel: Reliability) -> dict[str, Any]:
    """A plan's goodput under failures and where the rest of its time goes:
    :meth:`TrainingEstimate.summary`'s ``reliability``."""
    return {
        "gpus": rel.gpus,
        "job_mtbf_s": rel.job_mtbf_s,
        "checkpoint_interval_s": rel.interval_s,
        "restart_s": rel.restart_s,
        "durable_after_s": rel.durable_after_s,
        "goodput": rel.goodput,
        "checkpoint_share": rel.checkpoint_share,
        "data_loading_share": rel.data_loading_share,
        "lost_work_share": rel.lost_work_share,
        "restart_share": rel.restart_share,
        # an average interruption's cost (None when nothing trains)
        "lost_work_per_failure_s": _finite_or_none(rel.lost_per_failure_s),
        "restart_per_failure_s": _finite_or_none(rel.restart_per_failure_s),
        "optimal_checkpoint_every_steps": rel.optimal_every_steps,
        "optimal_goodput": rel.optimal_goodput,
    }


def _hardware_flops(est: TrainingEstimate, i: int) -> dict[str, float]:
    w = est.workload
    mode = RECOMPUTE[int(est.plans.recompute[i])]
    again = recompute_flops_per_token(
        w.model, w.seq_len, mode, float(est.memory.recompute_fraction[i]), w.recompute_modules
    )
    per_token = model_flops_per_token(w.model, w.seq_len, causal=True) + again
    return {
        "hardware_flops_per_token": per_token,
        "hardware_tflops_per_gpu": float(est.tokens_per_s_per_gpu[i]) * per_token / 1e12,
    }


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def estimate(
    w: Workload, plans: Plans, cal: Calibration, memory: MemoryBreakdown | None = None
) -> TrainingEstimate:
    """Memory, step time and rates of each plan (``memory``: the plans' breakdown, when
    already computed)."""
    mem = memory if memory is not None else memory_breakdown(w, plans, cal)
    step = step_breakdown(w, plans, cal, mem.recompute_fraction)
    step_s = step.step_s
    used = plans.gpus_used().astype(np.float64)
    tps = w.tokens_per_step / (step_s * used)
    flops_tok = model_flops_per_token(w.model, w.seq_len, causal=True)
    tflops = tps * flops_tok / 1e12
    mfu = tflops * 1e12 / w.gpu.peak_flops(w.precision)
    return TrainingEstimate(w, plans, mem, step, step_s, tps, tflops, mfu, cal)
