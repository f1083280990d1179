"""Cluster spec: the YAML schema (pydantic, where input enters) and the resolved spec.

``load_cluster_spec(path)`` reads a cluster YAML, validates it, resolves the catalog names
(system, fabric, switch) and returns a frozen :class:`ClusterSpec`. Every user error is an
:class:`~gpuscale.errors.InputError` whose field is the dotted path into the YAML.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from gpuscale.catalog import System, get_system
from gpuscale.errors import InputError, unknown_key
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import MAX_GPUS
from gpuscale.spec.files import read_yaml
from gpuscale.topology.fabrics import FabricTech, Switch, check_switch_for, get_fabric, get_switch

if TYPE_CHECKING:
    from gpuscale.topology.layout import Layout

DEFAULT_NODES_PER_RACK = 4
"""8-GPU nodes per rack when the spec does not say: DGX SuperPOD H100 puts the 32 DGX of
one SU in 8 racks (shke.com.cn/?p=7546, SU layout figure; RA 'Table 7' counts 38 racks for
127 nodes including network and management racks)."""


def _ratio(v: object) -> object:
    """'2:1' -> 2.0; numbers pass through (pydantic checks the type and bound)."""
    if isinstance(v, str) and ":" in v:
        down, _, up = v.partition(":")
        try:
            return float(down) / float(up)
        except (ValueError, ZeroDivisionError):
            return v
    return v


Ratio = Annotated[float, BeforeValidator(_ratio), Field(ge=1.0)]
MAX_FEEDS_PER_RACK = 64
"""Most power feeds a rack is given: racks take two (A and B) and dense NVL72 racks a few
more; one feed per kilowatt of a 130 kW rack would still be far above it."""
PosInt = Annotated[int, Field(strict=True, gt=0, le=MAX_GPUS)]
"""A count of nodes, racks or ports: up to MAX_GPUS, refused before any layout is built."""


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FabricIn(_In):
    kind: str
    switch: str | None = None


class OversubscriptionIn(_In):
    leaf: Ratio = 1.0
    spine: Ratio = 1.0

    @model_validator(mode="before")
    @classmethod
    def _scalar_is_leaf(cls, v: object) -> object:
        return v if isinstance(v, dict) else {"leaf": v}


class TopologyIn(_In):
    rail_optimized: bool = True
    tiers: Literal[2, 3] = 2
    oversubscription: OversubscriptionIn = Field(default_factory=OversubscriptionIn)
    nodes_per_su: PosInt | None = None
    radix: PosInt | None = None


class PlacementIn(_In):
    nodes_per_rack: PosInt | None = None
    racks_per_row: PosInt = 8
    power_feeds_per_rack: Annotated[int, Field(strict=True, gt=0, le=MAX_FEEDS_PER_RACK)] = 2


class ClusterIn(_In):
    name: Annotated[str, Field(min_length=1, pattern=r"\S")]  # names files and reports
    description: str = ""
    system: str
    nodes: PosInt
    nics_per_node: Annotated[int, Field(strict=True, ge=1)] | None = None
    nic_gbps: Annotated[float, Field(gt=0)] | None = None
    host_cpu: Literal["intel", "amd", "arm"] | None = None
    fabric: FabricIn
    topology: TopologyIn = Field(default_factory=TopologyIn)
    placement: PlacementIn = Field(default_factory=PlacementIn)


_SECTIONS: dict[str, type[BaseModel]] = {
    "": ClusterIn,
    "fabric": FabricIn,
    "topology": TopologyIn,
    "topology.oversubscription": OversubscriptionIn,
    "placement": PlacementIn,
}

_VALID: dict[str, str] = {
    "name": "a non-blank name (it names the exported files and the reports)",
    "nodes": f"a positive integer up to {MAX_GPUS:,} (catalog system units: nodes, or "
    "compute trays for NVL72)",
    "nics_per_node": "a positive integer, at most the system's PCIe slots",
    "host_cpu": "intel, amd or arm (the nodes' CPUs: NCCL's network overhead per step)",
    "topology.tiers": "2 or 3 (tiers of the fat tree)",
    "topology.oversubscription.leaf": "a down:up ratio >= 1 (1 = non-blocking), e.g. 2 or '2:1'",
    "topology.oversubscription.spine": "a down:up ratio >= 1 (1 = non-blocking), e.g. 2 or '2:1'",
    "topology.nodes_per_su": f"a positive integer up to {MAX_GPUS:,} (nodes per scalable unit / "
    "leaf group)",
    "topology.radix": f"a positive integer up to {MAX_GPUS:,} (switch ports at the fabric speed)",
    "placement.nodes_per_rack": f"a positive integer up to {MAX_GPUS:,}",
    "placement.racks_per_row": f"a positive integer up to {MAX_GPUS:,}",
    "placement.power_feeds_per_rack": f"a positive integer up to {MAX_FEEDS_PER_RACK}",
}


def _input_error(exc: ValidationError, raw: dict[str, Any]) -> InputError:
    """The first pydantic error as an InputError on the dotted YAML path."""
    errs = exc.errors()
    e = next((x for x in errs if x["type"] == "extra_forbidden"), errs[0])  # typos first
    loc = [str(p) for p in e["loc"] if not isinstance(p, int)]
    field = ".".join(loc) or "cluster"
    value: object = e.get("input")
    if e["type"] == "missing":
        parent = ".".join(loc[:-1])
        model = _SECTIONS.get(parent, ClusterIn)
        required = [k for k, f in model.model_fields.items() if f.is_required()]
        return InputError(
            field, None, f"required in {parent or 'the cluster spec'}: {', '.join(required)}"
        )
    if e["type"] == "extra_forbidden":
        model = _SECTIONS.get(".".join(loc[:-1]), ClusterIn)
        return unknown_key(field, value, loc[-1], model.model_fields)
    return InputError(field, value, _VALID.get(field, e["msg"]))


@dataclass(frozen=True)
class Placement:
    nodes_per_rack: int
    racks_per_row: int
    power_feeds_per_rack: int


@dataclass(frozen=True)
class ClusterSpec:
    """A validated cluster: catalog system x node count on a fat-tree fabric (SI inside)."""

    name: str
    description: str
    system: System
    nodes: int
    nics_per_node: int
    nic_gbps: float
    fabric: FabricTech
    switch: Switch
    radix: int
    rail_optimized: bool
    tiers: int
    oversubscription_leaf: float
    oversubscription_spine: float
    nodes_per_su_requested: int | None
    placement: Placement
    notes: tuple[str, ...] = ()

    @property
    def gpus_per_node(self) -> int:
        return self.system.gpus_per_node

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.system.gpus_per_node

    @property
    def domain_gpus(self) -> int:
        """GPUs in one NVLink domain (1 for a PCIe-only node)."""
        return max(1, self.system.nvlink_domain_gpus)

    @property
    def nodes_per_domain(self) -> int:
        return max(1, self.domain_gpus // self.gpus_per_node)

    @property
    def link_gbps(self) -> float:
        """Rate of one NIC-to-leaf link: the slower of NIC and fabric port."""
        return min(self.nic_gbps, self.fabric.port_gbps)

    @property
    def link_bw_Bps(self) -> float:
        return self.link_gbps * 1e9 / 8.0

    @property
    def nic_bw_Bps_per_gpu(self) -> float:
        """Scale-out injection bandwidth per GPU, one direction, bytes/s."""
        return self.nics_per_node * self.link_bw_Bps / self.gpus_per_node

    @property
    def protocol(self) -> str:
        return self.fabric.protocol

    def layout(self) -> Layout:
        """Switch counts and port use per tier (pure arithmetic, cached per spec)."""
        from gpuscale.topology.layout import plan_layout

        return plan_layout(self)

    def to_fabric(self) -> Fabric:
        """The contract with the collective model (:class:`gpuscale.perf.comm.Fabric`)."""
        lay = self.layout()
        if self.oversubscription_leaf > 1.0:
            leaf_gpus, over = lay.leaf_group_gpus, self.oversubscription_leaf
        elif self.tiers == 3 and self.oversubscription_spine > 1.0:
            leaf_gpus, over = lay.pod_gpus, self.oversubscription_spine
        else:
            leaf_gpus, over = self.total_gpus, 1.0
        # start from what the collective model derives from the system itself (e.g. NVLS
        # efficiency), then set what the cluster decides; optional fields only where present
        known = {f.name for f in fields(Fabric)}
        extra: dict[str, Any] = {}
        if "nics_per_node" in known:
            extra["nics_per_node"] = self.nics_per_node
        if "transport" in known:
            extra["transport"] = "ib" if self.protocol == "infiniband" else "roce"
        return replace(
            Fabric.from_system(self.system, total_gpus=self.total_gpus),
            domain_gpus=self.domain_gpus,
            gpus_per_node=self.gpus_per_node,
            scaleup_bw_Bps=self.system.scaleup_bw_Bps,
            nic_bw_Bps_per_gpu=self.nic_bw_Bps_per_gpu,
            nvls=self.system.nvls,
            total_gpus=self.total_gpus,
            leaf_gpus=leaf_gpus,
            oversubscription=over,
            **extra,
        )


def load_cluster_spec(path: Path) -> ClusterSpec:
    """Read, validate and resolve a cluster YAML file."""
    p = Path(path)
    raw = read_yaml(p, "cluster", "a cluster YAML file")
    if not isinstance(raw, dict):
        raise InputError("cluster", str(p), "a YAML mapping with keys name, system, nodes, fabric")
    return parse_cluster_spec(raw)


def parse_cluster_spec(raw: dict[str, Any]) -> ClusterSpec:
    """Validate an already-parsed YAML mapping (see :func:`load_cluster_spec`)."""
    try:
        cin = ClusterIn.model_validate(raw)
    except ValidationError as exc:
        raise _input_error(exc, raw) from None
    system = get_system(cin.system, field="system")
    if cin.nodes * system.gpus_per_node > MAX_GPUS:
        raise InputError(
            "nodes",
            cin.nodes,
            f"at most {MAX_GPUS // system.gpus_per_node:,} {system.key} nodes of "
            f"{system.gpus_per_node} GPUs ({MAX_GPUS:,} GPUs, the most gpuscale models)",
        )
    if cin.host_cpu is not None and cin.host_cpu != system.host_cpu:
        # the same GPU board ships with other hosts (an HGX H100 with AMD EPYC CPUs)
        system = system.model_copy(update={"host_cpu": cin.host_cpu})
    fabric = get_fabric(cin.fabric.kind, field="fabric.kind")
    switch = get_switch(cin.fabric.switch or fabric.default_switch, field="fabric.switch")
    radix = check_switch_for(fabric, switch)
    topo = cin.topology
    if topo.radix is not None:
        if topo.radix > radix:
            raise InputError(
                "topology.radix",
                topo.radix,
                f"at most {radix} ({switch.key} ports at {fabric.port_gbps:g} Gb/s)",
            )
        radix = topo.radix
    notes: list[str] = []

    nics = system.nics_per_node if cin.nics_per_node is None else cin.nics_per_node
    if nics > system.pcie_slots:
        raise InputError(
            "nics_per_node",
            nics,
            f"1..{system.pcie_slots} ({system.key} has {system.pcie_slots} PCIe slots)",
        )
    if nics < 1:
        raise InputError(
            "nics_per_node", nics, f"{system.key} has no scale-out NIC; set 1..{system.pcie_slots}"
        )
    nic_gbps = system.nic_gbps if cin.nic_gbps is None else cin.nic_gbps
    if nic_gbps < fabric.port_gbps:
        raise InputError(
            "nic_gbps",
            nic_gbps,
            f">= {fabric.port_gbps:g} for {fabric.key}; or pick a fabric at {nic_gbps:g} Gb/s",
        )
    if nic_gbps > fabric.port_gbps:
        notes.append(
            f"NICs ({nic_gbps:g} Gb/s) run at the {fabric.key} port rate "
            f"({fabric.port_gbps:g} Gb/s)"
        )

    npd = max(1, system.nvlink_domain_gpus // system.gpus_per_node)
    if cin.nodes % npd:
        raise InputError(
            "nodes",
            cin.nodes,
            f"a multiple of {npd} ({system.key}: {npd} nodes of "
            f"{system.gpus_per_node} GPUs form one "
            f"{system.nvlink_domain_gpus}-GPU NVLink domain), "
            f"e.g. {math.ceil(cin.nodes / npd) * npd}",
        )
    if topo.tiers == 2 and topo.oversubscription.spine != 1.0:
        raise InputError(
            "topology.oversubscription.spine",
            topo.oversubscription.spine,
            "1 in a 2-tier fat tree (spines have no uplinks); use tiers: 3",
        )

    pl = cin.placement
    per_rack = pl.nodes_per_rack
    if per_rack is None:
        per_rack = npd if npd > 1 else DEFAULT_NODES_PER_RACK
    elif npd > 1 and per_rack != npd:
        raise InputError(
            "placement.nodes_per_rack",
            per_rack,
            f"{npd}: one {system.nvlink_domain_gpus}-GPU NVLink rack holds {npd} nodes",
        )

    spec = ClusterSpec(
        name=cin.name,
        description=cin.description,
        system=system,
        nodes=cin.nodes,
        nics_per_node=nics,
        nic_gbps=nic_gbps,
        fabric=fabric,
        switch=switch,
        radix=radix,
        rail_optimized=topo.rail_optimized,
        tiers=topo.tiers,
        oversubscription_leaf=topo.oversubscription.leaf,
        oversubscription_spine=topo.oversubscription.spine,
        nodes_per_su_requested=topo.nodes_per_su,
        placement=Placement(per_rack, pl.racks_per_row, pl.power_feeds_per_rack),
        notes=tuple(notes),
    )
    spec.layout()  # a fabric that cannot be built is an input error now, not at use
    return spec
