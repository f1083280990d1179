"""The fabric a published collective benchmark row describes.

A row's GPU, GPUs per node, scale-up text (PCIe only, an NVLink bridge, an NVSwitch board,
a rack's NVLink domain unless MNNVL is off), scale-out text ('8 x 400 Gbps', '400 Gb/s NDR
per GPU', '3200 Gbps EFAv2 (32 EFA devices)'), transport (InfiniBand, RoCE, EFA) and host
CPU become a :class:`~gpuscale.perf.comm.Fabric`. What the row does not say comes from the
GPU's catalog system, and the result says where its NIC count came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuscale.catalog import GPU, System, get_gpu, system_for_gpu, systems
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.comm.nccl import NET_OVERHEAD_S, nvls_efficiency
from gpuscale.validate.numbers import count
from gpuscale.validate.report import SkipRow as SkipRowError


@dataclass(frozen=True)
class RowFabric:
    fabric: Fabric
    nics_from: str
    """'row' when the NICs come from the row's text, else the catalog system used."""


def _gpu(name: str) -> GPU:
    try:
        return get_gpu(name)
    except InputError:
        pass
    bare = re.sub(r"\s*\(.*?\)\s*", " ", name).strip()
    try:
        return get_gpu(bare)
    except InputError as exc:
        raise SkipRowError.not_in_catalog("gpu", name, exc) from None


_RATE = r"(\d+(?:\.\d+)?)\s*(Tb/s|Tbps|Gb/s|Gbps|Gbit/s|GbE|GBps|GB/s|G\b)"
"""A link rate; a bare G ('8x400G', '4x200G HDR') is a NIC's Gb/s, as NICs are sold."""
_WORDS = r"(?:[A-Za-z][\w-]*\s+)*?"
"""Words between a count and its rate ('8x ConnectX-7 400Gb/s') or a rate and 'per GPU'."""
_PRODUCT = (
    r"(\d+)\s*(?i:NICs?|HCAs?|ports?|adapters?)?\s*[x×]\s*(?:(\d+)\s*[x×]\s*)?" + _WORDS + _RATE
)
_PER_GPU = re.compile(
    r"\s*\(?\s*" + _WORDS + r"(?:(?:one\s+)?per|/|each|for each)\s*GPU\b", re.IGNORECASE
)
_RATE_TIMES = re.compile(_RATE + r"\s*[x×]\s*(\d+)\b")
"""A rate then its count ('InfiniBand NDR 400Gb/s x 8')."""


def _bps(value: str, unit: str) -> float:
    v = float(value)
    return {"Tb/s": v * 1e12 / 8, "Tbps": v * 1e12 / 8, "GBps": v * 1e9, "GB/s": v * 1e9}.get(
        unit, v * 1e9 / 8
    )


def parse_nics(text: str, gpus_per_node: int = 1) -> tuple[float, int] | None:
    """(node scale-out bytes/s, NIC count) from a row's ``inter_node`` text, or None.

    Understands '8 x 400 Gbps', '8 x 2 x 400 Gb/s = 6.4 Tb/s', '8 x 50 GBps', '8x
    ConnectX-7 400Gb/s', '8 NICs x 400 Gbps', '3200 Gbps EFAv2 (32 EFA devices)', '400
    Gbps ... per node' and, times the node's GPUs, '400 Gb/s NDR per GPU'. Text that says
    the figure is not stated, or gives no rate, returns None (the catalog system's NICs).
    """
    if "not stated" in text:
        return None
    prod = re.search(_PRODUCT, text)
    times = _RATE_TIMES.search(text)
    one = re.search(_RATE, text)
    if prod:
        nics, ports = int(prod.group(1)), int(prod.group(2) or 1)
        node_Bps, end = nics * ports * _bps(prod.group(3), prod.group(4)), prod.end()
    elif times:
        nics = int(times.group(3))
        node_Bps, end = nics * _bps(times.group(1), times.group(2)), times.end()
    elif one:
        devices = re.search(r"(\d+)\s+\w*\s*devices", text)
        nics = int(devices.group(1)) if devices else 0
        node_Bps, end = _bps(one.group(1), one.group(2)), one.end()
    else:
        return None
    if not (prod or times) and _PER_GPU.match(text, end):  # a single rate, said per GPU
        return node_Bps * gpus_per_node, nics * gpus_per_node or gpus_per_node
    return node_Bps, nics


HOST_CPUS: tuple[tuple[str, str], ...] = (
    (r"\bepyc\b|\bgenoa\b|\bmilan\b|\brome\b", "amd"),
    (r"\bxeon\b|(sapphire|emerald|granite) rapids|cascade lake", "intel"),
    (r"\bgrace\b", "arm"),
    # AWS instances by their published hosts: p4d/p4de Xeon 8275CL, p5/p5e EPYC 7R13,
    # p5en Xeon Sapphire Rapids, p6 Xeon Emerald Rapids
    (r"\bp5en\b", "intel"),
    (r"\bp5e?\b", "amd"),
    (r"\bp4de?\b|\bp6\b", "intel"),
)
"""Host CPU names and instance types a row's system text may give, and the CPU vendor, the
first match winning."""


def scale_up(intra: str, gpu: GPU, system: System, gpn: int) -> tuple[int, float]:
    """(NVLink domain GPUs, per-GPU scale-up bytes/s) from a row's ``intra_node`` text.

    'PCIe', 'PCIe only', 'PCIe Gen5, no NVLink' (or a GPU without NVLink): no domain, the
    PCIe figure of the GPU's generation. 'NVLink bridge': pairs, so a larger node's ring
    crosses PCIe. A rack-scale system's GPU (GB200, GB300) is in its rack's domain (NVL72)
    unless the text says MNNVL is off; any other NVLink GPU sits on an NVSwitch board.
    """
    low = intra.lower()
    pcie = systems()["pcie-8gpu-gen5" if gpu.pcie_gen >= 5 else "pcie-8gpu-gen4"]
    # PCIe said of the GPUs, not of a board's NICs or host link ('HGX baseboard, NICs on
    # PCIe Gen5 switches' is an NVSwitch board)
    board = re.search(r"nvlink|nvswitch|nvl\d|hgx|dgx|sxm|baseboard", low)
    no_nvlink = re.search(r"\b(no|without) nvlink|nvlink[\s_-]*(disabled|off)|pcie only", low) or (
        "pcie" in low and not board
    )
    if no_nvlink or gpu.nvlink_gb_per_s <= 0:
        return 1, pcie.scaleup_bw_Bps
    if "bridge" in low:
        return (gpn, gpu.nvlink_bw_Bps) if gpn <= 2 else (1, pcie.scaleup_bw_Bps)
    rack = system.nvlink_domain_gpus > system.gpus_per_node
    mnnvl_off = r"\b(no|without) mnnvl|mnnvl[\s_]*(disabled|off)|mnnvl_enable\s*=\s*0"
    if rack and not re.search(mnnvl_off, low):
        return system.nvlink_domain_gpus, gpu.nvlink_bw_Bps
    return gpn, gpu.nvlink_bw_Bps  # an NVSwitch board: the node is the domain


def row_fabric(row: dict[str, str], where: str) -> RowFabric:
    """The fabric a collectives row ran on, and where its NICs come from: the NVLink domain and
    per-GPU scale-up bytes/s from the ``intra_node`` text (:func:`scale_up`), the scale-out
    bytes/s per GPU and NIC count from the ``inter_node`` text (:func:`parse_nics`) or else the
    GPU's reference system, the transport (EFA, RoCE or InfiniBand) the text names, and the
    network overhead in seconds of the host CPUs named (else the system's)."""
    gpu = _gpu(row["gpu"])
    system = system_for_gpu(gpu)
    gpn = count(row, "gpus_per_node", where)
    if gpn is None:
        raise SkipRowError("GPUs per node not stated")
    domain, up_Bps = scale_up(row["intra_node"], gpu, system, gpn)
    inter = row["inter_node"]
    parsed = parse_nics(inter, gpn)
    if parsed is not None:
        node_Bps, nics = parsed
        nics_from = "row"
        if not node_Bps > 0:
            raise SkipRowError(f"inter_node={inter!r}: no scale-out bandwidth (0 NICs or 0 Gb/s)")
    else:
        node_Bps = system.nic_bw_Bps_per_gpu * gpn
        nics = max(1, round(system.nics_per_node * gpn / system.gpus_per_node))
        nics_from = system.key
    low = (inter + " " + row["system"]).lower()
    transport = "efa" if ("efa" in low or "aws" in low) else "roce" if "roce" in low else "ib"
    # the host CPUs, where the row names them, else the GPU's reference system's
    named = [v for pat, v in HOST_CPUS if re.search(pat, low)]
    host = named[0] if named else system.host_cpu
    fabric = Fabric(
        domain_gpus=domain,
        gpus_per_node=gpn,
        scaleup_bw_Bps=up_Bps,
        nic_bw_Bps_per_gpu=node_Bps / gpn,
        nvls=system.nvls and domain > 1,
        scaleup_mesh=system.scaleup_mesh and domain > 1,
        nics_per_node=nics,
        nvls_efficiency=nvls_efficiency(gpu.key),
        transport=transport,
        net_overhead_s=NET_OVERHEAD_S[host],
    )
    return RowFabric(fabric, nics_from)
