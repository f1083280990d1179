"""Matching GPU names as published sources write them.

Benchmark tables and papers name the same part many ways: "A100-SXM4-80GB", "8x H100 SXM5
80GB HBM3", "NVIDIA H100 Tensor Core GPU", "A100-SXM4-80GB (DGX A100)". This module reads
such a description as the one catalog GPU it names (or none, when it fits no part or more
than one), and words the error for a name it cannot place, with the closest catalog keys.
"""

from __future__ import annotations

import difflib
import re
from functools import cache

from rapidfuzz.distance import OSA

from gpuscale.catalog._store import _compact, _gpu_index, _norm, gpus, systems
from gpuscale.catalog.schema import GPU
from gpuscale.errors import InputError

_BRACKETED = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")
"""A bracketed note: the system, platform or run it was measured on ("(DGX-H100)")."""
_SIZE = re.compile(r"\b(\d+(?:\.\d+)?) ?gi?b?\b")
"""A memory size in a lower-cased name: "80GB", "80 GB", "40G", "141GiB"."""
_POWER = re.compile(r"\b\d+(?:\.\d+)? ?k?w\b")
"""A power figure in a lower-cased name: "700W", "1000 W", "1.2kW" (it names no part)."""
_COUNT = re.compile(
    r"^\s*\d+ ?[x\u00d7*](\s+|(?=[a-z]))|\b\d+x\b"
    r"|\s[x\u00d7*] ?(([1-9]|1[0-6])( ?gpus?)?|\d+ ?gpus?)\s*$|\b\d+[ -]?(gpus?|way)\b"
)
"""A GPU count: "8x MI350X", "8 x H100", "8*H100", "A100-SXM4-80GB x 8 GPUs" (after the
name, up to 16 unless "GPUs" follows: "A100 x 40" may be a size without its unit, which is
no count), "HGX H100 8-GPU"."""
_FORM = re.compile(r"pcie|nvl|oam|sxm\d*")
"""A form-factor word (a whole token)."""
_FORM_WORDS = frozenset({"pcie", "nvl", "oam", "sxm"})
"""The form-factor words without a generation, as a misspelling is checked against them."""
_NEUTRAL = re.compile(r"gpus?|hbm\d*e?|trays?")
"""Words that name no part: "GPU", a memory technology ("HBM3"), a compute tray ("4 GPUs
per tray"; not a misspelled "Cray")."""
_BRANDS = {
    "tesla": "nvidia", "geforce": "nvidia", "quadro": "nvidia",
    "instinct": "amd", "radeon": "amd",
    # makers of accelerators the catalog does not hold: they fit no part
    "intel": "intel", "gaudi": "intel", "habana": "intel", "google": "google", "tpu": "google",
    "trainium": "aws", "inferentia": "aws",
}  # fmt: skip
"""Product brands and makers, each checked against the part's vendor like the vendor's own
name."""
_GONE = "\x00"
"""What a size or a power figure leaves: no word, but it keeps "a100-80gb-pcie" one piece."""
_JOINED = re.compile(r"[a-z0-9\x00]+(?:[-_]+[a-z0-9\x00]+)*")
"""Words joined by dashes or underscores, the way a key is spelled ("h100-sxm5-80gb")."""


def _outside(text: str) -> str:
    """``text`` lower-cased outside brackets, sizes and power figures as :data:`_GONE`,
    counts as spaces."""
    text = _BRACKETED.sub(" ", text.lower())
    text = _POWER.sub(_GONE, _SIZE.sub(_GONE, text))
    return _COUNT.sub(" ", text)


_S_PARTS = frozenset({"l40s"})
"""Catalog parts whose name ends in S (L40S): no plural of another part. (The V100S the
catalog lacks: "V100s" are V100s.)"""


def _words(text: str) -> list[str]:
    """The words of a lower-cased ``text``; a family's plural ("H100s") is the family."""
    words = (t for t in re.split(r"[^a-z0-9]+", text) if t)
    return [t[:-1] if _plural(t) else t for t in words]


def _plural(word: str) -> bool:
    return word.endswith("s") and word not in _S_PARTS and word[:-1] in _families()


def _tokens(text: str) -> list[str]:
    """The words of ``text`` outside brackets, less memory sizes, power figures and counts,
    lower-cased."""
    return _words(_outside(text))


def _groups(text: str) -> list[list[str]]:
    """The words of ``text`` (as :func:`_tokens`), grouped as dashes and underscores join
    them: "H100-SXM5 80GB with NVLink" is [["h100", "sxm5"], ["with"], ["nvlink"]]."""
    groups = (_words(g) for g in _JOINED.findall(_outside(text)))
    return [g for g in groups if g]


def _family(key: str) -> str:
    return key.split("-")[0]


@cache
def _families() -> frozenset[str]:
    return frozenset(_family(k) for k in gpus()) - {"rtx"}  # a product line, not a part


@cache
def _vocab(key: str) -> frozenset[str]:
    """The words a GPU's names use: its key, name and aliases, and those of the systems
    that house it ("DGX", "HGX", "Selene", "Grand Teton", "NVL72"). Bracketed notes and bare
    numbers are not names (a bare number in a user's name is a size without its unit)."""
    g = gpus()[key]
    names = [key, g.name, *g.aliases]
    for s in systems().values():
        if s.gpu == key:
            names += [s.key, s.name, *s.aliases]
    return frozenset(t for n in names for t in _tokens(n) if not t.isdigit())


@cache
def _forms(key: str) -> frozenset[str]:
    """The form-factor words that fit a GPU: "nvl" for an NVL part (a PCIe card, but named
    NVL, so "PCIe" means the plain PCIe part), else those of its ``form_factor`` ("SXM5"
    fits "sxm5" and "sxm"; "SXM" fits any generation)."""
    if "nvl" in _tokens(key) or "nvl" in _tokens(gpus()[key].name):
        return frozenset({"nvl"})
    words = {t for t in _tokens(gpus()[key].form_factor) if _FORM.fullmatch(t)}
    if any(t.startswith("sxm") for t in words):
        words.add("sxm")
    return frozenset(words)


def _form_fits(word: str, key: str) -> bool:
    forms = _forms(key)
    if word in forms:
        return True
    generations = {f for f in forms if f.startswith("sxm") and f != "sxm"}
    return word.startswith("sxm") and "sxm" in forms and not generations


@cache
def _vendors() -> frozenset[str]:
    return frozenset(g.vendor for g in gpus().values())


@cache
def _archs() -> frozenset[str]:
    return frozenset(g.arch for g in gpus().values())


def _word_fits(word: str, key: str) -> bool | None:
    """True when ``word`` names something GPU ``key`` is or is housed in, False when it
    names something it is not (another family, form factor, vendor or architecture), None
    when it names nothing the catalog knows."""
    g = gpus()[key]
    if _FORM.fullmatch(word):
        return _form_fits(word, key)
    if word in _families():
        return word == _family(key)
    if word in _vendors() or word in _BRANDS:
        return _BRANDS.get(word, word) == g.vendor
    if word in _archs():
        return word == g.arch
    if _NEUTRAL.fullmatch(word) or word in _vocab(key):
        return True
    return None


@cache
def _catalog_words() -> frozenset[str]:
    """Every word the catalog knows a GPU by: families, form factors, vendors, brands,
    architectures and the words of every part's and system's names."""
    words = {*_families(), *_FORM_WORDS, *_BRANDS, *_vendors(), *_archs()}
    return frozenset(words.union(*(_vocab(k) for k in gpus())))


@cache
def _misspelling(word: str) -> str | None:
    """The catalog word ``word`` misspells ("pcei": "pcie", "sxn": "sxm", "blackwel"), or
    None. A catalog word itself is none, nor its plural ("gcds"), nor one that differs
    only in its digits ("gen6", "nvl36": other things, not typos), nor one two edits off
    ("instance" is not "instinct"). Three letters are checked against the form factors
    only ("cpu" is not a misspelled "apu")."""
    if len(word) < 3 or word.isdigit() or word in _catalog_words():
        return None
    pool = _catalog_words() if len(word) > 3 else _FORM_WORDS
    letters = re.sub(r"\d", "", word)
    for known in sorted(pool):
        if word == known + "s" or letters == re.sub(r"\d", "", known):
            continue
        # one edit: an insert, delete, substitution or swap of neighbours (OSA distance)
        if OSA.distance(word, known) <= 1:
            return known
    return None


def _free_word_fits(word: str, key: str, bracketed: bool = False) -> bool:
    """Whether a word standing on its own (between spaces, or in brackets) leaves GPU
    ``key``: not when it contradicts the part, misspells a catalog word or, outside
    brackets, is a bare number (a size without its unit: "H100 SXM5 94"; a bracketed note
    may count things, "(2 nodes)"). A word that names nothing the catalog knows ("Tensor",
    "Core", "Superchip", "Accelerator", "with") is neutral."""
    fits = _word_fits(word, key)
    if fits is not None:
        return fits
    return (bracketed or not word.isdigit()) and _misspelling(word) is None


@cache
def _housing(family: str) -> dict[str, str]:
    """The keys and aliases of the catalog systems that house a part of ``family``, as their
    words joined by dashes ("dgx-2"), and the part each houses."""
    return {
        "-".join(_words(n.lower())): sy.gpu
        for sy in systems().values()
        if _family(sy.gpu) == family
        for n in (sy.key, sy.name, *sy.aliases)
    }


_COUNT_AFTER = re.compile(r"\s[x\u00d7*]\s*(\d+)\s*$")


def _count_after(lowered: str) -> str:
    """``lowered`` without a GPU count after the name beyond what :data:`_COUNT` takes
    ("H100 x 64"), where no part of the family the name spells has that many GB of memory
    ("A100 x 40" stays: it may be the 40 GB part)."""
    after = _COUNT_AFTER.search(lowered)
    if after is None:
        return lowered
    n = float(after.group(1))
    family = {t for t in _tokens(lowered[: after.start()]) if t in _families()}
    sizes = [g.hbm_gb for k, g in gpus().items() if _family(k) in family]
    if len(family) != 1 or any(abs(gb - n) <= 0.1 * n for gb in sizes):
        return lowered
    return lowered[: after.start()]


def _gpu_by_description(name: str) -> str | None:
    """The one catalog GPU a free-text name describes, or None when it is not exactly one.

    Published tables write the same part many ways ("NVIDIA H100 80GB HBM3", "H100 SXM5",
    "8x MI350X", "A100-SXM4-80GB (DGX A100)", "NVIDIA H100 Tensor Core GPU"). The name must
    contain one family token (the first part of a catalog key: h100, a100, mi300x, ...). A
    memory size picks the family's part(s) of that size ("H100 94GB" is the NVL part;
    within 10 %: "B300 288GB" is the 279 GB part). Then the other words:

    - words joined to the family token by dashes or underscores, the way a key is spelled
      ("h100-sxm5-80gb"), must each fit the part: a form factor it has (PCIe, NVL, SXM,
      OAM), its vendor, brand or architecture, a word of its own names or of the systems
      that house it (DGX, HGX, NVL72), or a generic word ("GPU", "HBM3"). So "h100-pcei",
      "mi300x-typo" and "a100-sxm-40" (a bare 40) leave no part;
    - a word standing on its own (between spaces, or in brackets) must not contradict the
      part (another form factor, family, vendor or architecture; "SXM6" fits an SXM part
      of no stated generation, not an SXM5 one), misspell a catalog word ("H100 pcei") or
      be a bare number; a word the catalog does not know ("Tensor Core", "Superchip",
      "Accelerator", "with NVLink", "AC", "700W") is neutral.

    The size may contradict a named form factor ("H100 SXM5 94GB": 94 GB is the NVL part).
    Of the parts left, those that the most words outside brackets name are kept ("H100
    Grand Teton" is the Grand Teton part); SXM/OAM unless a form factor is named. What is
    left must be a single entry or the family's own alias (``H100`` is the SXM5 80 GB part).
    """
    lowered = _count_after(name.lower())
    groups = _groups(lowered)
    outer = [t for g in groups for t in g]
    inner = _tokens(" ".join(m.group(0)[1:-1] for m in _BRACKETED.finditer(lowered)))
    families = {t for t in outer + inner if t in _families()}
    if len(families) != 1:
        return None
    family = families.pop()
    joined = [t for g in groups if family in g for t in g]
    # a system that houses the family, spelled with its digits ("DGX-2 (V100 32GB)")
    housing = _housing(family)
    housed = {housing["-".join(g)] for g in groups if "-".join(g) in housing}
    free = [t for g in groups if family not in g and "-".join(g) not in housing for t in g]
    cands = [k for k in gpus() if _family(k) == family]
    for size in (float(m.group(1)) for m in _SIZE.finditer(lowered)):
        gap = {k: abs(gpus()[k].hbm_gb - size) for k in cands}
        near = min(gap.values(), default=0.0)
        cands = [k for k in cands if gap[k] <= 0.1 * size and gap[k] == near]
    cands = [
        k
        for k in cands
        if all(_word_fits(t, k) for t in joined)
        and all(_free_word_fits(t, k) for t in free)
        and all(_free_word_fits(t, k, bracketed=True) for t in inner)
    ]
    cands = [k for k in cands if k in housed] or cands  # the part the system named holds
    named = {k: sum(_word_fits(t, k) is True for t in outer) for k in cands}
    cands = [k for k in cands if named[k] == max(named.values())]
    if not any(_FORM.fullmatch(t) for t in outer + inner):  # SXM/OAM unless one is named
        cands = [k for k in cands if not _forms(k) & {"pcie", "nvl"}] or cands
    if len(cands) == 1:
        return cands[0]
    # the family's own alias ("A100" is the SXM 80 GB part), or its alias for the form
    # factor named ("A100 PCIe" is the 80 GB PCIe part)
    forms = {t for t in outer + inner if _FORM.fullmatch(t)}
    for alias in (family, *(f"{family}-{f}" for f in sorted(forms))):
        default = _gpu_index().get(_norm(alias))
        if default in cands:
            return default
    return None


def _unknown_gpu(field: str, name: str) -> InputError:
    """An unknown-GPU error. It suggests the keys of the family the name spells: first
    those the most of its words fit (a misspelled word read as the catalog word it
    misspells: "h100-pcei" is the PCIe part), then the closest in spelling. A name of no
    family gets the keys close in spelling, else the known keys, closest first, and how
    many more there are."""
    words = _words(name.lower())
    read = [_misspelling(t) or t for t in words]
    families = set(words) & _families()
    compact = _compact(name)

    def spelling(key: str) -> float:
        return difflib.SequenceMatcher(None, compact, _compact(key)).ratio()

    def rank(key: str) -> tuple[bool, int, float, str]:
        fit = sum(_word_fits(t, key) is True for t in read) if families else 0
        return _family(key) not in families, -fit, -spelling(key), key

    ranked = sorted(gpus(), key=rank)
    near = [k for k in ranked if _family(k) in families or spelling(k) >= 0.6][:3]
    if near:
        return InputError(field, name, f"unknown; did you mean {', '.join(near)}?")
    shown, more = ranked[:12], len(ranked) - 12
    tail = f", … ({more} more)" if more > 0 else ""
    return InputError(field, name, f"unknown; known: {', '.join(shown)}{tail}")


def family_default(name: str, gpu: GPU) -> str | None:
    """Where ``name`` is a bare family ("a100", "H100") that the catalog reads as one of
    several parts, a sentence saying which and naming the others; else None."""
    family = _family(gpu.key)
    if _compact(name) != family or gpu.key == family:
        return None
    others = [k for k in gpus() if _family(k) == family and k != gpu.key]
    if not others:
        return None
    return (
        f"gpu {name!r} is read as {gpu.key} ({gpu.name}); the catalog also has {', '.join(others)}"
    )
