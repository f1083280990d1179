"""A training job described in YAML: what ``gpuscale train`` needs besides the plan. Any key
may be left out when a flag gives it; model, gpu and gpus must come from one or the other.

name: llama3-70b pre-training
model: llama3-70b          # catalog key or a config.json path (relative: beside this file)
gpu: h100-sxm
gpus: 1024
seq_len: 8192              # default 2048
global_batch: 1024          # sequences per step; default 512
precision: bf16             # bf16 (default; fp16 without bf16) | fp16 | fp8 | fp4
attention: fused            # optional: fused | flash2 | unfused
zero3_gathers: coalesced    # optional: coalesced (FSDP) | per-param (DeepSpeed ZeRO-3)
grad_accumulation: fused    # optional: fused (in the GEMMs) | separate (DeepSpeed's BF16 optimizer)
pp_p2p: overlapped          # optional: overlapped (Megatron) | blocking (DeepSpeed's pipeline)
cp_comm: p2p                # optional: p2p (ring, default) | a2a (Ulysses) | all_gather (Llama 3)
pp_split: even              # optional: even (Megatron's default) | account | balanced
elementwise: fused          # optional: fused (TE, torch.compile) | eager (op by op)
loss: eager                 # optional: fused | eager cross-entropy (default: as elementwise)
fp8_param_gather: false     # optional: gather FP8 weights, keep no 16-bit copy (fp8/fp4 only)
cuda_graphs: false          # optional: the whole step replays as CUDA graphs (no host costs)
ep_dispatch: hierarchical   # optional: hierarchical (DeepEP, HybridEP) | all_to_all (NCCL)
recompute_modules: [layernorm, moe_act]   # optional: what selective recompute runs again
mtp: 1                      # optional: multi-token-prediction depths (default: the model's)
memory_headroom: 0.1        # optional: fraction of GPU memory a plan must leave free (default 0)
shard_group: 8              # optional: hybrid sharding (HSDP) over 8 DP ranks (default: all)
tokens: 15T                 # optional: time and GPU-hours to train
checkpoint_every: 30min     # optional: how often the run saves (30min, 2h, 500steps, best)
storage_write_bw: 200GB/s   # optional: the storage's aggregate write rate (checkpoints)
storage_read_bw: 50GB/s     # optional: its aggregate read rate (training data, reloads)
async_checkpoint: false     # optional: save in the background (stall only to copy to host)
gpu_mtbf: 2112d             # optional: GPU-time between unplanned interruptions (job MTBF x GPUs)
restart_time: 10min         # optional: detect, relaunch (the checkpoint reload is added)
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuscale.errors import InputError, unknown_key
from gpuscale.paths import path_kind
from gpuscale.spec.files import read_yaml


def given_as(key: str) -> str:
    """Where a workload value can be given: its flag or its workload-file key."""
    return f"--{key.replace('_', '-')} or the workload's {key}"


TEXT_VALID = {
    "tokens": "a count with a decimal prefix, e.g. 15T or 2e12",
    "checkpoint_every": "a time such as 30min, a step count such as 500steps, or best",
    "storage_write_bw": "a rate, e.g. 200GB/s",
    "storage_read_bw": "a rate, e.g. 200GB/s",
    "gpu_mtbf": "a time with its unit, e.g. 2112d",
    "restart_time": "a time with its unit, e.g. 10min",
}
"""What the keys given as text (a count, a time, a rate) take, for a YAML true/false."""


class TrainingJob(BaseModel):
    # strict: `gpus: true` or `seq_len: "8k"` is an error, not 1 or a guess
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    # every key may be left out (or null) when a flag gives it; the command then takes the
    # flag, else its default (cli/train_workload.py), and names a required one missing
    name: str = ""
    model: str | None = None
    gpu: str | None = None
    gpus: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0)
    global_batch: int | None = Field(default=None, gt=0)
    precision: str | None = None
    attention: str | None = None
    zero3_gathers: str | None = None
    grad_accumulation: str | None = None
    pp_p2p: str | None = None
    cp_comm: str | None = None
    pp_split: str | None = None
    elementwise: str | None = None
    ep_dispatch: str | None = None
    recompute_modules: str | list[str] | None = None
    fp8_param_gather: bool | None = None
    cuda_graphs: bool | None = None
    loss: str | None = None
    mtp: int | None = Field(default=None, ge=0)
    memory_headroom: float | None = None  # checked by the Workload, as the flag is
    shard_group: int | None = None  # checked by the Workload, as the flag is
    system: str | None = None
    tokens: str | None = None
    checkpoint_every: str | None = None
    storage_write_bw: str | None = None
    storage_read_bw: str | None = None
    async_checkpoint: bool | None = None
    gpu_mtbf: str | None = None
    restart_time: str | None = None


PLAN_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "recompute", "zero", "dist_opt", "sp")
"""A plan's flags, which a workload file does not hold (the estimate and search take them)."""


def load_training_job(path: Path) -> TrainingJob:
    """Read and validate a job file; every problem is an :class:`InputError` naming the key."""
    data = read_yaml(path, "workload", "a workload YAML file")
    if not isinstance(data, dict):
        raise InputError("workload", str(path), "a YAML mapping of key: value")
    # a misspelled key first: `seqlen:` is that typo, not "seq_len missing"
    for key, value in data.items():
        if key in PLAN_KEYS:
            raise InputError(
                f"{path.name}:{key}",
                value,
                f"none here: a plan's degrees are not workload keys; give --"
                f"{key.replace('_', '-')} to train estimate, or let train search choose them",
            )
        if key not in TrainingJob.model_fields:
            raise unknown_key(f"{path.name}:{key}", value, str(key), TrainingJob.model_fields)
    # counts and quantities YAML reads as numbers are parsed as the flags' text is
    texts = ("tokens", "checkpoint_every", "storage_write_bw", "storage_read_bw")
    for key in (*texts, "gpu_mtbf", "restart_time"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, str | int | float | None):
            shown = value if isinstance(value, bool) else f"a {type(value).__name__}"
            raise InputError(f"{path.name}:{key}", shown, TEXT_VALID[key])
        if value is not None:
            data[key] = str(value)
    model = data.get("model")
    if isinstance(model, str) and model.endswith(".json") and not Path(model).is_absolute():
        # a config.json named beside the workload file, as validate's files name theirs
        beside = path.parent / model
        field = f"{path.name}:model"
        if path_kind(beside, field) != "missing" or path_kind(Path(model), field) == "missing":
            data["model"] = str(beside)
    try:
        return TrainingJob.model_validate(data)
    except ValidationError as exc:
        errs = exc.errors()
        # the most specific error: a bad item of a list names the item, not the list
        err = max(errs, key=lambda e: len(e["loc"]))
        if len(err["loc"]) == len(errs[0]["loc"]):
            err = errs[0]
        # the key, without the member tags of a union ("str", "list[str]") pydantic adds;
        # a list item keeps its index (recompute_modules.1)
        parts = [str(p) for p in err["loc"]]
        key = [p for p in parts if p in TrainingJob.model_fields or p.isdigit()] or parts[:1]
        loc = ".".join(key) or "workload"
        # a union's members each fail on the same value: say what any of them takes
        same = [e["msg"] for e in errs if e.get("input") is err.get("input")]
        valid = "; or ".join(dict.fromkeys(same or [err["msg"]]))
        raise InputError(f"{path.name}:{loc}", err.get("input"), valid) from None
