"""In words, why a search's best plan beats its runner-up: the step-time terms that differ
most between the two, what the rest adds up to, and their memory."""

from __future__ import annotations

from gpuscale.perf.plan import PP_SPLITS
from gpuscale.search.plans import SearchResult, same_layout
from gpuscale.units import GiB

TIE_GAP = 0.05
"""A predicted gap between two plans under which the explanation says to measure both:
on published runs of one job with two plans, gpuscale orders pairs predicted closer than
this as measured far less reliably than pairs predicted further apart (``gpuscale
validate training`` prints the share by predicted gap; :mod:`gpuscale.validate.ranking`)."""


def _listed(items: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


_TERM_WORDS = {
    "compute_s": "compute",
    "recompute_s": "recomputation",
    "memory_bound_s": "memory-bound kernels",
    "quantise_s": "low-precision casts",
    "tp_comm_s": "TP communication",
    "cp_comm_s": "CP communication",
    "ep_comm_s": "EP communication",
    "pp_comm_s": "PP communication",
    "bubble_s": "pipeline bubble",
    "dp_comm_s": "DP communication",
    "optimizer_s": "optimizer step",
    "grad_accum_s": "gradient accumulation",
    "overhead_s": "fixed overhead",
}
"""Step-time terms as the explanation names them."""


def explain(result: SearchResult) -> str:
    """In words: why the best plan beats the runner-up (the terms that differ most)."""
    e = result.estimate
    b, r = result.best, result.runner_up()
    if r is None:
        return f"{e.plans.label(b)} is the only plan that fits."
    gain = result.vs_best(r) * 100.0
    diffs = sorted(
        ((k, float(v[r] - v[b])) for k, v in e.step.terms().items()), key=lambda kv: -abs(kv[1])
    )
    saves: list[str] = []
    costs: list[str] = []
    net = float(e.step_s[r] - e.step_s[b])
    moved = _itemised(diffs, net, least_itemised(float(e.step_s[b]), net))
    for k, d in moved[:6]:
        (saves if d > 0 else costs).append(
            f"{abs(d) * 1e3:.1f} ms of {_TERM_WORDS.get(k, k.removesuffix('_s'))}"
        )
    rest = moved[6:]
    for group, sign, what in ((saves, 1.0, "savings"), (costs, -1.0, "costs")):
        n = sum(1 for _k, d in rest if d * sign > 0)
        if n:
            group.append(f"{n} smaller {what}")
    clauses = [f"{w} {_listed(x)}" for w, x in (("saves", saves), ("costs", costs)) if x]
    # what the terms not itemised add up to, so that the itemised ones and it make the net
    unnamed = net - sum(d for _k, d in moved[:6])
    if clauses:
        small = (
            f", {unnamed * 1e3:+.1f} ms of it from terms not itemised"
            if abs(unnamed) >= 5e-5
            else ""
        )
        clauses[-1] += f" (net {net * 1e3:.1f} ms a step{small})"
    total_b, total_r = float(e.memory.total[b]) / GiB, float(e.memory.total[r]) / GiB
    if f"{total_b:.1f}" == f"{total_r:.1f}":  # the same to the printed figure
        mem = f"both use {total_b:.1f} GiB of memory per GPU"
    else:
        more = "more" if total_b > total_r else "less"
        mem = (
            f"it uses {abs(total_b - total_r):.1f} GiB {more} memory per GPU "
            f"({total_b:.1f} vs {total_r:.1f} GiB)"
        )
    speed = (
        f"is {gain:.1f}% faster per step than"
        if gain >= 0.05
        else "is as fast per step (within 0.05 %) as"
    )
    rank = result.rank_of(r)
    p = e.plans
    other = not same_layout(p, r, b)
    which = (
        f"the fastest plan with another parallel layout, {p.label(r)} (#{rank})"
        if other
        else f"the next plan, {p.label(r)} (#{rank}), of the same layout (no other is ranked)"
    )
    close = (
        f" A gap under {TIE_GAP * 100:.0f} % is within gpuscale's plan-ranking error: on "
        "published runs of one job measured with both plans, the plan it predicts faster "
        "by so little is not reliably the faster one (`gpuscale validate training` prints "
        "how often it is, by predicted gap); measure both before committing to one."
        if gain < TIE_GAP * 100.0
        else ""
    )
    return (
        f"{p.label(b)} {speed} {which}: it "
        f"{' but '.join(clauses) or 'differs only marginally'}; {mem}.{_placement(result)}"
        f"{close}"
    )


def least_itemised(step_s: float, net_s: float) -> float:
    """The smallest change of a term the explanation names: a tenth of the net gain, or a
    per-mille of the step where that is less (a long step's gain is made of terms small
    beside the step), never under a hundred-thousandth of the step (noise)."""
    return max(1e-5 * step_s, min(1e-3 * step_s, 0.1 * abs(net_s)))


def _itemised(diffs: list[tuple[str, float]], net: float, least: float) -> list[tuple[str, float]]:
    """The terms that make the difference, largest first (``diffs`` is so sorted): each at
    least a tenth of the largest change (a net gain is often a large saving against several
    smaller costs), and smaller ones too while those left out would add up to more than a
    quarter of the net; none under ``least`` seconds."""
    top = abs(diffs[0][1]) if diffs else 0.0
    out: list[tuple[str, float]] = []
    for k, d in diffs:
        left = net - sum(x for _k, x in out)
        if abs(d) < least or (abs(d) < 0.1 * top and abs(left) <= 0.25 * abs(net)):
            break
        out.append((k, d))
    return out


def _placement(result: SearchResult) -> str:
    """What the best plan's layer placement gains over the even split, when it is not even."""
    b = result.best
    p = result.estimate.plans
    split = PP_SPLITS[int(p.split[b])]
    if split == "even":
        return ""
    twin = result.even_twin(b)
    if twin is None:
        return (
            f" It places its layers {split}; placed evenly (Megatron's default), the same plan "
            "is not among those ranked."
        )
    return (
        f" Its {split} layer placement makes it {result.vs_best(twin) * 100.0:.1f}% faster "
        f"than the same plan placed evenly, Megatron's default (#{result.rank_of(twin)})."
    )
