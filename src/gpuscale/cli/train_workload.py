"""The training workload a `gpuscale train` command runs: its flags, or a workload file
(examples/workloads/) that the flags override."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuscale.catalog import get_gpu, get_model, get_system, system_for_gpu
from gpuscale.catalog.gpu_names import family_default
from gpuscale.catalog.schema import GPU
from gpuscale.cli._common import err
from gpuscale.errors import InputError
from gpuscale.ops.reliability import MAX_TIME_S, FailurePolicy
from gpuscale.perf.comm import Fabric
from gpuscale.perf.comm.moe import EP_DISPATCH
from gpuscale.perf.plan import Workload
from gpuscale.perf.recompute import DEFAULT_MODULES, parse_modules
from gpuscale.perf.storage import StoragePolicy, parse_interval
from gpuscale.spec import load_training_job
from gpuscale.spec.workload import given_as
from gpuscale.units import parse_duration, parse_quantity

REQUIRED = ("model", "gpu", "gpus")
DEFAULTS: dict[str, Any] = {
    "seq_len": 2048,
    "global_batch": 512,
    "precision": None,  # bf16 where the GPU has it, else fp16 (Volta)
    "system": None,  # the GPU's reference node
    "attention": None,  # unfused on Volta, the fused kernel from Ampere on
    "zero3_gathers": "coalesced",
    "grad_accumulation": "fused",
    "pp_p2p": "overlapped",
    "cp_comm": "p2p",
    "pp_split": "even",
    "elementwise": "fused",
    "ep_dispatch": "hierarchical",
    "recompute_modules": None,  # core_attn
    "mtp": None,  # the model's own
    "fp8_param_gather": False,
    "cuda_graphs": False,
    "loss": None,  # as elementwise
    "memory_headroom": 0.0,
    "shard_group": 0,  # shard over every data-parallel rank
}
"""The workload keys besides :data:`REQUIRED`, with the value a command takes when neither
a flag nor the file gives one."""

STORAGE_KEYS = ("checkpoint_every", "storage_write_bw", "storage_read_bw", "async_checkpoint")
"""Workload keys that price checkpoints and data loading (perf/storage.py); none is needed."""
FAILURE_KEYS = ("gpu_mtbf", "restart_time")
"""Workload keys that price failures and goodput (ops/reliability.py), with checkpoints."""

TOKENS_VALID = "a count with a decimal prefix, e.g. 15T or 2e12"


@dataclass(frozen=True)
class Resolved:
    workload: Workload
    train_tokens: float | None
    """Tokens to train on (``--tokens`` or the file's ``tokens``), for time and GPU-hours."""
    modules_text: str | None
    """The recompute modules as given (flag or file), None for the default."""
    storage: StoragePolicy | None = None
    """How the run checkpoints and reads its data, when any storage key is given."""
    failures: FailurePolicy | None = None
    """How often nodes fail and how long a restart takes, when given."""
    file_keys: dict[str, str] = field(default_factory=dict)
    """The keys whose value the workload file gave, each as its errors name it
    (``job.yaml:global_batch``)."""
    defaulted: frozenset[str] = frozenset()
    """The keys neither a flag nor the file gave (:data:`DEFAULTS`' value), which an error
    about their value says."""

    def where(self, key: str) -> str:
        """The field an error about ``key``'s value names: the flag's, or file:key."""
        return self.file_keys.get(key, key.replace("_", "-"))

    @contextmanager
    def naming_file_values(self) -> Iterator[None]:
        """Errors about a value the workload file gave (a global batch that the plan's
        DP x micro-batch does not divide) name the file and its key, not the flag; about a
        default, say so."""
        with _naming(self.file_keys, self.defaulted):
            yield


@contextmanager
def _naming(file_keys: dict[str, str], defaulted: frozenset[str] = frozenset()) -> Iterator[None]:
    try:
        yield
    except InputError as exc:
        key = exc.field.replace("-", "_")
        if key in defaulted:  # a value the user never gave: say where it came from
            flag = "--" + exc.field.replace("_", "-")
            said = f"{exc.valid} ({exc.value} is the default: give {flag})"
            raise InputError(exc.field, exc.value, said) from None
        where = file_keys.get(key)
        if where is None:
            raise
        raise InputError(where, exc.value, exc.valid) from None


def _mount(g: GPU) -> str:
    """How a GPU sits in its system: on a baseboard (SXM/OAM), as a superchip, or a card."""
    ff = g.form_factor.lower()
    if "superchip" in ff:
        return "superchip"
    return "PCIe card" if ff.startswith("pcie") else "baseboard module"


def build_workload(
    model: str,
    gpu: str,
    gpus: int,
    seq_len: int,
    global_batch: int,
    precision: str | None,
    system: str | None,
    attention: str | None = None,
    zero3_gathers: str = "coalesced",
    elementwise: str = "fused",
    mtp: int | None = None,
    ep_dispatch: str = "hierarchical",
    recompute_modules: str | None = None,
    fp8_param_gather: bool = False,
    cuda_graphs: bool = False,
    loss: str | None = None,
    memory_headroom: float | None = None,
    shard_group: int = 0,
    grad_accumulation: str = "fused",
    pp_p2p: str = "overlapped",
    pp_split: str = "even",
    cp_comm: str = "p2p",
) -> Workload:
    """The training workload the flags describe: the catalog model and GPU on ``gpus`` GPUs of the
    named system (else the GPU's reference system), at the GPU's default training precision and
    attention kernel unless given; a system of another GPU generation or mount, expert-parallel
    dispatch for a dense model, a fused attention kernel on Volta or more MTP depths than layers
    is an :class:`InputError`."""
    g = get_gpu(gpu)
    precision = precision or g.training_precision
    attention = attention or g.attention_kernel
    # an explicit --system may house a GPU other than its reference one, of its generation
    # and mount (an H200 in a DGX H100 chassis), not one of another generation (an A100 in
    # a GB200 NVL72 rack) or mount (a GB200 superchip on an HGX B200 baseboard); a generic
    # PCIe server takes any PCIe card
    s = get_system(system) if system else system_for_gpu(g)
    if system:
        home = get_gpu(s.gpu)
        generic = s.key.startswith("pcie-") and _mount(g) == "PCIe card"
        if not generic and (home.arch != g.arch or _mount(home) != _mount(g)):
            raise InputError(
                "system",
                system,
                f"a system for {g.arch} GPUs as a {_mount(g)} like {g.key}; {s.key} houses "
                f"{home.arch} GPUs as a {_mount(home)} ({home.key})",
            )
    m = get_model(model)
    if ep_dispatch != "hierarchical" and ep_dispatch in EP_DISPATCH and not m.is_moe:
        raise InputError("ep-dispatch", ep_dispatch, f"for MoE models; {m.key} has no experts")
    if attention in ("fused", "flash2") and g.arch == "volta":
        raise InputError(
            "attention",
            attention,
            f"unfused on {g.key}: the fused and FlashAttention-2 kernels need Ampere or later",
        )
    if mtp is not None:
        if not 0 <= mtp <= m.layers:
            raise InputError("mtp", mtp, f"a number of MTP depths, 0 to {m.layers} (its layers)")
        sets = min(m.mtp_weight_sets or mtp, mtp) if m.mtp_layers else mtp
        m = m.model_copy(update={"mtp_layers": mtp, "mtp_weight_sets": sets})
    return Workload(
        m,
        g,
        s,
        Fabric.from_system(s, gpus),
        gpus,
        seq_len,
        global_batch,
        precision.strip().lower(),  # "FP8" as papers write it
        attention=attention,
        zero3_gathers=zero3_gathers,
        elementwise=elementwise,
        ep_dispatch=ep_dispatch,
        fp8_param_gather=fp8_param_gather,
        cuda_graphs=cuda_graphs,
        loss=loss,
        memory_headroom=0.0 if memory_headroom is None else memory_headroom,
        shard_group=shard_group,
        grad_accumulation=grad_accumulation,
        pp_p2p=pp_p2p,
        pp_split=pp_split,
        cp_comm=cp_comm,
        recompute_modules=(
            parse_modules(recompute_modules.split(","))
            if recompute_modules is not None
            else DEFAULT_MODULES
        ),
    )


MAX_TOKENS = 1e16
"""The most training tokens ``--tokens`` takes: 10P, hundreds of times the largest
pre-training runs published (Llama 3's 15.6T, Qwen3's 36T)."""


def parse_tokens(tokens: str | None) -> float | None:
    """A training run's token count from ``--tokens`` ("15T", "300B", "2e12"; None when not
    given), a whole number of tokens: B means billions, a lower-case m, g or t a count, and a
    binary prefix (15Ti) or more than :data:`MAX_TOKENS` is an :class:`InputError`."""
    if tokens is None:
        return None
    text = tokens.strip()
    if text[-1:] in ("B", "b") and text[-2:-1].isdigit():
        text = text[:-1] + "G"  # "300B tokens" means billions here, not bytes
    if text[-1:] in ("m", "g", "t") and text[-2:-1].isdigit():
        text = text[:-1] + text[-1].upper()  # 15t, 300m: counts, never milli-tokens
    if text[-1:] == "i":  # 15Ti: a binary prefix counts bytes, never tokens
        raise InputError("tokens", tokens, TOKENS_VALID)
    try:
        v = parse_quantity(text, "number", "tokens")
    except InputError as exc:
        if exc.valid.startswith("a finite"):
            raise  # a number, but not a usable one (1e400): its own reason
        raise InputError("tokens", tokens, TOKENS_VALID) from None
    if v > MAX_TOKENS:
        raise InputError("tokens", tokens, f"at most {MAX_TOKENS:.0e} tokens (10P), e.g. 15T")
    whole = round(v)
    # 4.1T is 4,099,999,999,999.9995 in binary floating point: a whole count, rounded
    if v < 1 or abs(v - whole) > 1e-9 * v:
        raise InputError("tokens", tokens, "a whole count of at least one token, e.g. 15T or 2e12")
    return float(whole)


def storage_policy(values: dict[str, Any]) -> StoragePolicy | None:
    """The storage keys' values (None where not given) as a policy; None when none is."""
    if all(values.get(k) is None for k in STORAGE_KEYS):
        return None
    every = values.get("checkpoint_every")
    best = every is not None and every.strip().lower() == "best"
    mode = values.get("async_checkpoint")
    if mode is not None and every is None:
        raise InputError(
            "async-checkpoint" if mode else "sync-checkpoint",
            mode,
            "a save mode needs checkpoints to price: --checkpoint-every (or the workload's "
            "checkpoint_every) and --storage-write-bw",
        )
    secs, steps = parse_interval(every) if every is not None and not best else (None, None)

    def rate(key: str) -> float | None:
        text = values.get(key)
        if text is None:
            return None
        field = key.replace("_", "-")
        v = parse_quantity(text, "bytes/s", field)
        if not v > 0:
            raise InputError(field, text, "a positive rate, e.g. 200GB/s")
        return v

    policy = StoragePolicy(
        checkpoint_every_s=secs,
        checkpoint_every_steps=steps,
        write_Bps=rate("storage_write_bw"),
        read_Bps=rate("storage_read_bw"),
        asynchronous=bool(mode),
        checkpoint_every_best=best,
    )
    policy.check()
    return policy


def _duration(text: str, field: str, example: str, positive: bool) -> float:
    """A time with its unit (``2112d``, ``10min``): a bare number names none."""
    v = parse_duration(text, field)
    if v is None:
        raise InputError(field, text, f"a time with its unit, e.g. {example}")
    if not (v > 0 if positive else v >= 0) or v > MAX_TIME_S:
        least = "above 0" if positive else "of 0 or more"
        raise InputError(field, text, f"a time {least}, at most {MAX_TIME_S:g} s, e.g. {example}")
    return v + 0.0  # -0 s is 0 s


def failure_policy(values: dict[str, Any]) -> FailurePolicy | None:
    """The failure keys' values (None where not given) as a policy; None when neither is."""
    mtbf, restart = values.get("gpu_mtbf"), values.get("restart_time")
    if mtbf is None and restart is None:
        return None
    if mtbf is None:
        raise InputError(
            "gpu-mtbf",
            "(missing)",
            f"the GPU-time between interruptions ({given_as('gpu_mtbf')}), e.g. 2112d, with "
            "a restart time",
        )
    if restart is None:
        raise InputError(
            "restart-time",
            "(missing)",
            f"how long a restart takes besides the reload ({given_as('restart_time')}), e.g. "
            "10min, with a GPU MTBF",
        )
    return FailurePolicy(
        _duration(mtbf, "gpu-mtbf", "2112d", positive=True),
        _duration(restart, "restart-time", "10min or 0s", positive=False),
    )


def resolve(path: Path | None, flags: dict[str, Any], tokens: str | None) -> Resolved:
    """The workload of ``flags`` (each None where not given) over the file at ``path``, if
    any, over :data:`DEFAULTS`. An error in a value the file gave names the file."""
    job = load_training_job(path) if path is not None else None
    values: dict[str, Any] = {}
    from_file: set[str] = set()
    defaulted: set[str] = set()
    for key in (*REQUIRED, *DEFAULTS):
        value = flags.get(key)
        if value is None and job is not None and getattr(job, key) is not None:
            value = getattr(job, key)
            if key == "recompute_modules" and isinstance(value, list):
                value = ",".join(value)  # as the flag spells it
            from_file.add(key)
        if value is None:
            if key in REQUIRED:
                flag = "--" + key.replace("_", "-")
                raise InputError(
                    key, "(missing)", f"required: {flag}, or a --workload file with {key}"
                )
            value = DEFAULTS[key]
            defaulted.add(key)
        values[key] = value
    stored: dict[str, Any] = {}
    for key in (*STORAGE_KEYS, *FAILURE_KEYS):
        value = flags.get(key)
        if value is None and job is not None and getattr(job, key) is not None:
            value = getattr(job, key)
            from_file.add(key)
        stored[key] = value
    tokens_from_file = tokens is None and job is not None and job.tokens is not None
    if tokens_from_file:
        from_file.add("tokens")
    file_keys = {} if path is None else {k: f"{path.name}:{k}" for k in from_file}
    with _naming(file_keys, frozenset(defaulted)):
        w = build_workload(**values)
        said = family_default(str(values["gpu"]), w.gpu)
        if said is not None:
            err.print(f"note: {said}", highlight=False, soft_wrap=True)
        policy = storage_policy(stored)
        failures = failure_policy(stored)
        if failures is not None:
            failures.check(policy is not None and policy.checkpoints)
        if policy is not None and policy.checkpoint_every_best and failures is None:
            raise InputError(
                "checkpoint-every",
                "best",
                "a time or a step count, or best with --gpu-mtbf and --restart-time (the best "
                "interval weighs saving against failures)",
            )
        tt = parse_tokens(job.tokens if tokens_from_file and job is not None else tokens)
    modules = values["recompute_modules"]
    return Resolved(w, tt, modules, policy, failures, file_keys, frozenset(defaulted))
