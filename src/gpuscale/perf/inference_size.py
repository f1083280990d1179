"""Size an LLM serving deployment for a request rate and a latency SLO, at least cost.

For every candidate (GPU type x TP degree) the step model gives, with NumPy over batch
sizes, the steady-state capacity of one replica under the TPOT target: at ``b`` running
sequences an engine step takes ``t(b) = decode(b) + b / osl x isl x prefill-per-token``
(each step also prefills the prompts of the sequences that replace finishing ones), so a
replica serves ``b / (osl x t(b))`` requests/s. The largest ``b`` with ``t(b)`` inside the
TPOT target gives the replica capacity and ``ceil(qps / capacity)`` replicas; candidates are
then checked in order of cost with the serving simulation (Poisson arrivals split evenly
over replicas) and replicas are added until the simulated p99 TTFT and TPOT meet the SLO.
Replicas = ceil(target QPS / per-replica QPS) is the rule AIConfigurator ``recommend`` and
Vidur-Search apply (shared/research/inference-anchors.md, section 3 item 11).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from gpuscale.calibrate import Calibration
from gpuscale.catalog import GPU, Model, get_gpu
from gpuscale.errors import InputError, unknown_key
from gpuscale.perf.engines import EngineConfig
from gpuscale.perf.inference import build_step_model
from gpuscale.perf.inference_step import StepModel, causal_pairs
from gpuscale.perf.kv import precision_plan
from gpuscale.perf.plan import MAX_GPUS
from gpuscale.sim.arrivals import check_qps, poisson
from gpuscale.sim.results import ServingResult
from gpuscale.sim.serving import simulate
from gpuscale.spec.files import read_yaml
from gpuscale.units import fmt_time

SIM_REQUESTS = 12_000
"""Requests per verification simulation: a p99 over 10,000 steady-state requests (100 in
its tail) moves by a few percent from one arrival sequence to another, where over 1,500 it
moved by half (a 70B replica's TPOT p99 49.9 to 76.8 ms between two seeds)."""
SIM_WARMUP = 2_000
"""The first requests of a verification simulation, which meet an empty engine: left out of
the percentiles the SLO is checked on (with them, the p99 reads low)."""
CURVE_LOADS = (0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.25)
"""Per-replica load points of the latency-vs-load curve, as fractions of the sized load."""
MAX_EXTRA_REPLICAS = 6
"""Replica counts simulated beyond the analytic estimate before a candidate is given up."""
EXTRA_REPLICA_SHARE = 0.05
"""Each added step grows the estimate by this share of it (at least one replica): a
capacity estimate a few percent optimistic needs 1 more replica of 13 but 100 more of
2,000, and 6 steps reach 30 % more."""
PRICE_KEYS = ("usd_per_gpu_hour", "source")
"""Keys of a price given as a mapping (``h100-sxm: {usd_per_gpu_hour: 3.99, source: ...}``)."""


def load_prices(path: Path | None = None) -> dict[str, float]:
    """USD per GPU-hour by catalog GPU key (``catalog/data/prices.yaml`` or a user file).

    A user file maps GPU names (any catalog alias) to a number or to
    ``{usd_per_gpu_hour: x}``.
    """
    if path is None:
        text = resources.files("gpuscale.catalog").joinpath("data", "prices.yaml").read_text()
        where = "prices.yaml"
        raw = yaml.safe_load(text)
    else:
        where = str(path)
        raw = read_yaml(path, "--prices", "a YAML file of GPU name -> USD per GPU-hour")
    if not isinstance(raw, dict):
        raise InputError("--prices", where, "a mapping of GPU name -> USD per GPU-hour")
    out: dict[str, float] = {}
    for name, body in raw.items():
        if isinstance(body, dict):
            for key in body:
                if key not in PRICE_KEYS:
                    raise unknown_key(f"{where}:{name}.{key}", body[key], str(key), PRICE_KEYS)
        v = body.get("usd_per_gpu_hour") if isinstance(body, dict) else body
        out[get_gpu(str(name), field=f"{where}:{name}").key] = _usd_per_hour(v, f"{where}:{name}")
    return out


def _usd_per_hour(v: object, field: str) -> float:
    """A price: a positive, finite number (YAML's true is no price, though a Python int)."""
    usd = math.nan
    if isinstance(v, int | float) and not isinstance(v, bool):
        try:
            usd = float(v)
        except OverflowError:  # an integer of hundreds of digits
            usd = math.inf
    if not 0 < usd < math.inf:
        raise InputError(field, v, "a positive, finite USD per GPU-hour")
    return usd


@dataclass(frozen=True)
class CurvePoint:
    qps: float
    ttft_p99_s: float
    tpot_p99_s: float
    output_tokens_per_s: float
    meets_slo: bool


@dataclass(frozen=True)
class Candidate:
    gpu: str
    precision: str
    tp: int
    replicas: int
    gpus: int
    replica_capacity_qps: float
    """Analytic steady-state capacity of one replica under the TPOT target."""
    usd_per_hour: float | None
    usd_per_million_output_tokens: float | None
    utilization: float
    """Offered load / analytic capacity of the deployment."""
    ttft_p99_s: float
    tpot_p99_s: float
    max_seqs: int
    verified: bool


@dataclass(frozen=True)
class SizingResult:
    best: Candidate
    considered: list[Candidate]
    curve: list[CurvePoint]


@dataclass(frozen=True)
class Slo:
    ttft_p99_s: float
    tpot_p99_s: float


def _capacity(sm: StepModel, isl: int, osl: int, tpot_s: float) -> float:
    """Requests/s one replica sustains with steps inside ``tpot_s`` (0 if none): at b
    running sequences a step decodes b tokens and prefills the b / osl prompts that replace
    the sequences finishing, in one iteration whose weight reads both share (an MoE
    replica reads its experts once a step, not once for the decodes and again for the
    prompts)."""
    bmax = max(sm.memory.max_seqs, 1)
    b = np.arange(1, bmax + 1, dtype=np.float64)
    ctx = isl + osl / 2.0
    prompts = b / osl
    pairs = causal_pairs(0, isl)
    t = np.array(
        [
            sm.step_time_s(p * isl, p * pairs, float(p), int(bi), bi * ctx)
            for p, bi in zip(prompts, b, strict=True)
        ]
    )
    ok = t <= tpot_s
    if not ok.any():
        return 0.0
    x = np.where(ok, b / (osl * t), 0.0)
    return float(x.max())


def _simulate(
    sm: StepModel, qps: float, isl: int, osl: int, cal: Calibration, n: int = SIM_REQUESTS
) -> ServingResult:
    wl = poisson(n, qps, isl, osl, seed=1)
    return simulate(sm, sm.limits(), wl, cal.inf_request_overhead_s, warmup=SIM_WARMUP)


@dataclass(frozen=True)
class _Sizing:
    """One sizing question: the load to serve (rate, prompt and output lengths), the SLO
    it must meet, the calibration of the step model and the prices that rank candidates."""

    qps: float
    isl: int
    osl: int
    slo: Slo
    cal: Calibration
    prices: dict[str, float]


@dataclass(frozen=True)
class _Screened:
    """A candidate that passed the analytic screen: its cost lower bound (USD per hour, or
    GPUs where nothing is priced), step model, replicas and one replica's capacity."""

    cost: float
    sm: StepModel
    replicas: int
    capacity_qps: float


@dataclass
class _Screening:
    """What the analytic screen found over every GPU x TP candidate, kept to explain an
    empty result."""

    passed: list[_Screened] = field(default_factory=list)
    best_fit: tuple[float, str] | None = None
    """(weights per GPU, where) of the candidate with the least weights a GPU, none fitting."""
    kv_short: tuple[float, str] | None = None
    """(KV pool per GPU, where) of the largest pool: weights fit, a sequence of isl + osl
    tokens does not."""
    zero_load: list[tuple[float, float, str]] = field(default_factory=list)
    """(TTFT unloaded, TPOT at batch 1, label) of every candidate that fits."""
    too_large: list[tuple[int, str]] = field(default_factory=list)
    """(GPUs, label) of deployments past MAX_GPUS."""


def size(
    model: Model,
    qps: float,
    isl: int,
    osl: int,
    slo: Slo,
    gpus: list[GPU],
    cal: Calibration,
    prices: dict[str, float],
    precision: str = "auto",
    engine: EngineConfig | None = None,
    tps: tuple[int, ...] = tuple(range(1, 9)),
) -> SizingResult:
    """The cheapest deployment meeting the SLO.

    Candidates are ranked by USD per hour when every GPU of ``gpus`` has a price in
    ``prices``, by GPU count when none has; a mix would compare dollars with GPUs, so an
    unpriced GPU among priced ones is an :class:`InputError` naming it.
    """
    _check_request(gpus, prices, qps, isl, osl, slo)
    q = _Sizing(qps, isl, osl, slo, cal, prices)
    eng = engine or EngineConfig()
    sc = _Screening()
    for gpu in gpus:
        prec = ("fp8" if "fp8" in gpu.peak_tflops else "bf16") if precision == "auto" else precision
        pplan = precision_plan(gpu, prec)
        for tp in tps:
            if any(heads % tp for heads, _ in model.head_counts):
                continue
            sm = build_step_model(model, gpu, pplan, tp, 1, cal, eng, isl + osl, isl)
            _screen(sc, sm, f"{gpu.key} {prec} TP{tp}", q)
    _check_fits(sc, model, isl, osl)
    _check_reachable(sc, qps, slo)
    screened = sorted(sc.passed, key=lambda s: (s.cost, s.sm.tp))
    best, considered = _verify(screened, q)
    sm_best = next(s.sm for s in screened if s.sm.gpu.key == best.gpu and s.sm.tp == best.tp)
    return SizingResult(best, considered, _curve(sm_best, best.replicas, q))


def _check_request(
    gpus: list[GPU], prices: dict[str, float], qps: float, isl: int, osl: int, slo: Slo
) -> None:
    """Prices for every candidate GPU or for none; a valid rate; positive, finite lengths
    and latency targets."""
    unpriced = [g.key for g in gpus if g.key not in prices]
    if unpriced and len(unpriced) < len(gpus):
        raise InputError(
            "gpus",
            ",".join(unpriced),
            "no USD per GPU-hour price while the other candidates have one; add "
            f"{'it' if len(unpriced) == 1 else 'them'} to --prices or drop "
            f"{'it' if len(unpriced) == 1 else 'them'} from --gpus",
        )
    check_qps(qps)
    for f, v in (
        ("input-len", isl),
        ("output-len", osl),
        ("ttft-p99", slo.ttft_p99_s),
        ("tpot-p99", slo.tpot_p99_s),
    ):
        if not v > 0 or math.isinf(v):
            raise InputError(f, v, "a positive, finite value")


def _screen(sc: _Screening, sm: StepModel, label: str, q: _Sizing) -> None:
    """Screen one candidate analytically, noting in ``sc`` why it fails: it must hold its
    weights and a sequence, meet the SLO unloaded (one prompt, a batch-1 decode step), and
    serve the rate with ``ceil(qps / capacity)`` replicas within MAX_GPUS."""
    if not sm.memory.fits:
        _note_unfit(sc, sm, label)
        return
    ttft0 = sm.prefill_time_s(q.isl) + q.cal.inf_request_overhead_s
    tpot1 = sm.decode_time_s(1, q.isl + q.osl / 2.0)
    sc.zero_load.append((ttft0, tpot1, label))
    if ttft0 > q.slo.ttft_p99_s or tpot1 > q.slo.tpot_p99_s:
        return
    cap = _capacity(sm, q.isl, q.osl, q.slo.tpot_p99_s)
    if cap <= 0:
        return
    reps = max(math.ceil(q.qps / cap), 1)
    gpus = reps * sm.tp
    if gpus > MAX_GPUS:
        sc.too_large.append((gpus, label))
        return
    price = q.prices.get(sm.gpu.key)
    cost = gpus * price if price is not None else float(gpus)
    sc.passed.append(_Screened(cost, sm, reps, cap))


def _note_unfit(sc: _Screening, sm: StepModel, label: str) -> None:
    """Keep the largest KV pool among candidates whose weights fit and the least weights a
    GPU among all that do not fit, for the error that no candidate fits."""
    pool = sm.memory.kv_pool_bytes
    if pool > 0 and (sc.kv_short is None or pool > sc.kv_short[0]):
        sc.kv_short = (pool, f"{pool / 1e9:.1f} GB per GPU on {label}")
    w = sm.memory.weights_bytes
    if sc.best_fit is None or w < sc.best_fit[0]:
        sc.best_fit = (
            w,
            f"{w / 1e9:.1f} GB of weights per GPU on {label} ({sm.gpu.memory_bytes / 1e9:.0f} GB)",
        )


def _check_fits(sc: _Screening, model: Model, isl: int, osl: int) -> None:
    """Some candidate holds the weights and one sequence; else say which falls short."""
    if not sc.zero_load and sc.kv_short is not None:
        total = isl + osl
        beyond = (
            f", beyond {model.key}'s max_seq of {model.max_seq}" if total > model.max_seq else ""
        )
        raise InputError(
            "input-len",
            isl,
            f"input-len {isl} + output-len {osl} = {total} tokens{beyond}: one sequence does "
            f"not fit in the KV cache of any candidate (the largest, {sc.kv_short[1]}); "
            "shorten --input-len/--output-len, or try a lower precision or more GPUs per "
            "replica",
        )
    if not sc.zero_load:
        raise InputError(
            "model",
            model.key,
            "does not fit on any candidate: "
            + (sc.best_fit[1] if sc.best_fit else "no candidate configuration")
            + "; try more GPUs per replica, a lower precision or shorter sequences",
        )


def _check_reachable(sc: _Screening, qps: float, slo: Slo) -> None:
    """Some fitting candidate passed the screen; else the rate needs too many GPUs, or the
    SLO is out of reach even unloaded (the fastest prefill, the fastest batch-1 decode)."""
    if sc.passed:
        return
    if sc.too_large:
        fewest = min(sc.too_large)
        raise InputError(
            "qps",
            qps,
            f"a lower rate: the fewest GPUs a candidate needs for it ({fewest[1]}) are "
            f"{fewest[0]:,}, beyond the {MAX_GPUS:,} gpuscale models",
        )
    t_best = min(sc.zero_load, key=lambda z: z[0])
    p_best = min(sc.zero_load, key=lambda z: z[1])
    if t_best[0] > slo.ttft_p99_s:
        raise InputError(
            "ttft-p99",
            fmt_time(slo.ttft_p99_s),
            f"unreachable: even unloaded the fastest prefill ({t_best[2]}) "
            f"takes {fmt_time(t_best[0])}, "
            f"{t_best[0] / slo.ttft_p99_s:,.2f}x the target",
        )
    raise InputError(
        "tpot-p99",
        fmt_time(slo.tpot_p99_s),
        f"unreachable: even at batch 1 the fastest decode step ({p_best[2]}) "
        f"takes {fmt_time(p_best[1])}, {p_best[1] / slo.tpot_p99_s:,.2f}x the target",
    )


def _replica_steps(estimate: int, most: int) -> list[int]:
    """The replica counts a candidate is simulated at: the analytic estimate, then
    MAX_EXTRA_REPLICAS steps of EXTRA_REPLICA_SHARE of it (at least one), at most ``most``."""
    step = max(1, math.ceil(estimate * EXTRA_REPLICA_SHARE))
    steps = (estimate + k * step for k in range(MAX_EXTRA_REPLICAS + 1))
    return [r for r in steps if r <= most]


def _verify(screened: list[_Screened], q: _Sizing) -> tuple[Candidate, list[Candidate]]:
    """(the cheapest verified candidate, every candidate simulated): in order of cost, each
    is simulated with replicas added (:func:`_replica_steps`) until the p99 TTFT and TPOT
    meet the SLO; a candidate whose lower bound costs no less than the best found ends the
    search."""
    slo = q.slo
    considered: list[Candidate] = []
    best: Candidate | None = None
    best_cost = math.inf
    for s in screened:
        if best is not None and s.cost >= best_cost:
            break
        sm = s.sm
        for r in _replica_steps(s.replicas, MAX_GPUS // (sm.tp * sm.pp)):
            res = _simulate(sm, q.qps / r, q.isl, q.osl, q.cal)
            ok = res.ttft_s.p99 <= slo.ttft_p99_s and res.tpot_s.p99 <= slo.tpot_p99_s
            cand = _candidate(sm, r, s.capacity_qps, q.qps, q.osl, q.prices, res, ok)
            if ok:
                considered.append(cand)
                c = cand.usd_per_hour if cand.usd_per_hour is not None else float(cand.gpus)
                if c < best_cost:
                    best, best_cost = cand, c
                break
        else:
            considered.append(cand)
    if best is None:
        # the deployment nearest the SLO: the smallest ratio of its worse p99 to its target
        closest = min(
            considered,
            key=lambda c: max(c.ttft_p99_s / slo.ttft_p99_s, c.tpot_p99_s / slo.tpot_p99_s),
        )
        raise InputError(
            "slo",
            f"TTFT p99 {slo.ttft_p99_s:g}s, TPOT p99 {slo.tpot_p99_s:g}s",
            f"not met under load: the closest tried, {closest.gpu} TP{closest.tp} x "
            f"{closest.replicas}, gives p99 TTFT {closest.ttft_p99_s:.3g}s, "
            f"TPOT {closest.tpot_p99_s:.3g}s",
        )
    return best, considered


def _curve(sm: StepModel, replicas: int, q: _Sizing) -> list[CurvePoint]:
    """Latency against load of the chosen deployment: each of CURVE_LOADS times the sized
    per-replica load simulated on one replica, figures scaled to all ``replicas``."""
    curve = []
    for load in CURVE_LOADS:
        rate = q.qps / replicas * load
        # as many requests as the check that chose it: at load 1, the same figures
        res = _simulate(sm, rate, q.isl, q.osl, q.cal)
        curve.append(
            CurvePoint(
                rate * replicas,
                res.ttft_s.p99,
                res.tpot_s.p99,
                res.output_tokens_per_s * replicas,
                res.ttft_s.p99 <= q.slo.ttft_p99_s and res.tpot_s.p99 <= q.slo.tpot_p99_s,
            )
        )
    return curve


def _candidate(
    sm: StepModel,
    reps: int,
    cap: float,
    qps: float,
    osl: int,
    prices: dict[str, float],
    res: ServingResult,
    ok: bool,
) -> Candidate:
    price = prices.get(sm.gpu.key)
    usd_h = price * reps * sm.tp if price is not None else None
    tokens_h = qps * osl * 3600.0
    return Candidate(
        gpu=sm.gpu.key,
        precision=sm.precision.name,
        tp=sm.tp,
        replicas=reps,
        gpus=reps * sm.tp,
        replica_capacity_qps=cap,
        usd_per_hour=usd_h,
        usd_per_million_output_tokens=(usd_h / tokens_h * 1e6) if usd_h is not None else None,
        utilization=qps / (reps * cap),
        ttft_p99_s=res.ttft_s.p99,
        tpot_p99_s=res.tpot_s.p99,
        max_seqs=sm.memory.max_seqs,
        verified=ok,
    )
