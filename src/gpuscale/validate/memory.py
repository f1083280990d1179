"""``gpuscale validate memory``: measured per-GPU peak memory of training runs.

Each row states one training plan and the peak memory one GPU measured running it; the
plan is estimated as ``gpuscale train estimate`` would and the two are compared. Columns
(``benchmarks/heldout/memory_published.csv`` holds 39 published rows in this schema):

- required: ``id``, ``model`` (catalog key, or a config.json path, relative to the CSV's
  folder), ``gpu``, ``num_gpus``, ``seq_len``, ``global_batch`` (sequences a step),
  ``metric`` and ``measured_gib`` (GiB, 2^30 bytes);
- optional, defaults as the command's: ``micro_batch`` (1), ``tp``, ``pp``, ``vpp``, ``cp``,
  ``ep`` (1), ``sp`` (true with TP; spelled as a training row's seq_parallel), ``sharding``
  (none, dist-opt, zero1, zero2, zero3 or fsdp; none), ``shard_group``, ``recompute`` (none,
  selective, full, partial; none), ``recompute_modules``, ``precision`` (bf16; fp16 on
  Volta), ``elementwise`` (fused or eager: fused), ``loss`` (fused or eager: as
  ``elementwise``), ``source`` (the by-source table), ``notes``, ``compile`` (context only:
  ``elementwise`` and ``loss`` say what torch.compile changed). Other columns are named in a
  note as not read. The attention kernel is the GPU's default, as the command's: fused, or
  on Volta Megatron's unfused path, whose score matrices are held for the backward.

``metric`` says what was measured: ``reserved_peak`` (``torch.cuda.max_memory_reserved``,
torchtitan's logged memory) and ``allocated_peak`` (``max_memory_allocated``, Megatron's
mem-max-allocated-bytes) are the PyTorch caching allocator's, which never sees the CUDA
context nor NCCL's buffers: they are compared with gpuscale's total less its fixed
workspace (:attr:`Calibration.mem_reserved_bytes`), activations still with their 10 %
allocator margin. ``device_used`` (nvidia-smi,
NVML's used memory) is compared with the whole total.
"""

from __future__ import annotations

from pathlib import Path

from gpuscale.calibrate import Calibration
from gpuscale.catalog import get_gpu, get_model, gpus, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.memory import memory_breakdown
from gpuscale.perf.plan import ELEMENTWISE, RECOMPUTE, SHARDING, Plans, Workload
from gpuscale.perf.recompute import DEFAULT_MODULES, parse_modules
from gpuscale.perf.validity import check_plan
from gpuscale.validate.numbers import count, positive
from gpuscale.validate.report import (
    RowResult,
    SkipRow,
    ValidationReport,
    read_rows,
    signed_error_pct,
    unread_columns,
)
from gpuscale.validate.training import source_group
from gpuscale.validate.training_cells import read_seq_parallel

REQUIRED = ("id", "model", "gpu", "num_gpus", "seq_len", "global_batch", "metric", "measured_gib")
OPTIONAL = (
    "micro_batch",
    "tp",
    "pp",
    "vpp",
    "cp",
    "ep",
    "sp",
    "sharding",
    "shard_group",
    "recompute",
    "recompute_modules",
    "precision",
    "elementwise",
    "loss",
    "source",
    "notes",
    "compile",
)
METRICS = {"reserved_peak": False, "allocated_peak": False, "device_used": True}
"""What a row measured, and whether the figure holds the CUDA/NCCL workspace."""
GIB = 2.0**30


def _choice(
    row: dict[str, str], col: str, valid: tuple[str, ...], default: str | None, where: str
) -> str:
    """A cell that is one of ``valid``; empty gives ``default`` ("": none), or with None
    (a required cell) is an error."""
    value = row.get(col, "").strip().lower() or default
    if value is None or (value and value not in valid):
        raise InputError(f"{where}:{col}", row[col], f"one of {', '.join(valid)}")
    return value


def _degree(row: dict[str, str], col: str, where: str) -> int:
    value = count(row, col, where)
    return 1 if value is None else value


def _workload(row: dict[str, str], folder: Path, where: str) -> Workload:
    name = row["model"]
    if name.endswith(".json") and not Path(name).is_absolute():
        name = str(folder / name)
    try:
        model, gpu = get_model(name), get_gpu(row["gpu"])
    except InputError as exc:
        raise SkipRow(str(exc)) from None  # a part the catalog lacks: skipped, with why
    sizes = {c: count(row, c, where) for c in ("num_gpus", "seq_len", "global_batch")}
    if None in sizes.values():
        raise SkipRow("GPU count, sequence length or global batch not stated")
    system = system_for_gpu(gpu)
    names = row.get("recompute_modules", "").strip()
    modules = parse_modules(names.split(","), f"{where}:recompute_modules") if names else None
    precision = row.get("precision", "").strip().lower() or gpu.training_precision
    if precision not in gpu.peak_tflops:
        raise SkipRow(f"precision={precision!r}: {gpu.key} has no {precision} peak")
    n_gpus, seq, gbs = (int(v or 0) for v in sizes.values())
    return Workload(
        model,
        gpu,
        system,
        Fabric.from_system(system, n_gpus),
        n_gpus,
        seq,
        gbs,
        precision,
        attention=gpu.attention_kernel,
        elementwise=_choice(row, "elementwise", ELEMENTWISE, "fused", where),
        loss=_choice(row, "loss", ELEMENTWISE, "", where) or None,
        shard_group=count(row, "shard_group", where) or 0,
        recompute_modules=modules or DEFAULT_MODULES,
    )


def _plan(row: dict[str, str], w: Workload, where: str) -> Plans:
    tp, pp, cp = (_degree(row, c, where) for c in ("tp", "pp", "cp"))
    if w.num_gpus % (tp * pp * cp):
        raise SkipRow(f"tp x pp x cp = {tp * pp * cp} does not divide {w.num_gpus} GPUs")
    sharding = _choice(row, "sharding", (*SHARDING, "fsdp"), "none", where)
    # spelled as the training runs' seq_parallel is (yes/no, true/false, ticks, "SP")
    try:
        said = read_seq_parallel(row.get("sp", ""))
    except SkipRow as exc:  # its reason names the training files' column
        raise SkipRow(str(exc).replace("seq_parallel=", "sp=", 1)) from None
    sp = tp > 1 and (said is None or said)  # on with TP unless the row says not
    plan = Plans.of(
        tp=tp,
        pp=pp,
        vpp=_degree(row, "vpp", where),
        cp=cp,
        ep=_degree(row, "ep", where),
        dp=w.num_gpus // (tp * pp * cp),
        mbs=_degree(row, "micro_batch", where),
        recompute=RECOMPUTE.index(_choice(row, "recompute", RECOMPUTE, "none", where)),
        sharding=SHARDING.index("zero3" if sharding == "fsdp" else sharding),
        sp=sp,
    )
    try:
        check_plan(w, plan)
    except InputError as exc:
        raise SkipRow(f"stated plan is not valid here: {exc}") from None
    return plan


def validate_memory(path: Path, cal: Calibration) -> ValidationReport:
    """The memory validation report of a CSV file: per row, the predicted peak memory in GiB of
    :func:`memory_breakdown` for the row's workload and plan (less the reserved bytes for a
    metric that excludes them) against the measured GiB, with whether it fits the GPU; a row
    without a measured figure, or beyond any part of its architecture, is skipped."""
    rows: list[RowResult] = []
    table = read_rows(path, REQUIRED)
    for lineno, row in table:
        where = f"{path.name}:line {lineno}"
        metric = _choice(row, "metric", tuple(METRICS), None, where)
        group = source_group(row.get("source", "")) or "(no source)"
        try:
            if row["measured_gib"].strip().endswith("%"):
                raise SkipRow(
                    f"measured_gib={row['measured_gib']!r}: a share of the GPU's memory, not "
                    "GiB (the memory it is a share of is not known)"
                )
            measured = positive(row, "measured_gib", where)
            if measured is None:
                raise SkipRow("no measured_gib value")
            w = _workload(row, path.parent, where)
            # a variant may hold more than the catalog part (a 96 GB H100), none more than
            # the largest part of its architecture
            most = max(g.memory_bytes for g in gpus().values() if g.arch == w.gpu.arch) / GIB
            if measured > most:
                raise SkipRow(
                    f"measured_gib={row['measured_gib']!r}: beyond any {w.gpu.arch} part's "
                    f"memory (at most {most:.1f} GiB)"
                )
            plan = _plan(row, w, where)
        except SkipRow as why:
            rows.append(RowResult.skip(row["id"], str(why), None, group, "peak_memory_gib"))
            continue
        mem = memory_breakdown(w, plan, cal)
        total = float(mem.total[0]) - (0.0 if METRICS[metric] else cal.mem_reserved_bytes)
        predicted = total / GIB
        fits = bool(mem.fits[0])
        over = "" if fits else f"; beyond the {w.gpu.key}'s {mem.capacity / GIB:.1f} GiB"
        rows.append(
            RowResult(
                row["id"],
                predicted,
                measured,
                signed_error_pct(predicted, measured),
                "scored",
                f"{metric}; {plan.label(0)}{over}",
                group,
                "peak_memory_gib",
                {"plan": plan.label(0), "fits": fits},
            )
        )
    return ValidationReport("memory", rows, unread_columns(table, (*REQUIRED, *OPTIONAL)))
