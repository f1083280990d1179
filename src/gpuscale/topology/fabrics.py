"""Scale-out fabric catalog: link technologies and switches (``catalog/data/fabrics.yaml``).

Kept beside the topology code (not in :mod:`gpuscale.catalog`) because only cluster specs use
it. Lookups accept the key or any alias, case-insensitively, and suggest close names.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuscale.errors import InputError, unknown

Protocol = Literal["infiniband", "roce"]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    key: str = ""
    name: str
    aliases: list[str] = Field(default_factory=list)
    protocol: Protocol
    source: str


class FabricTech(_Entry):
    """A link technology: InfiniBand HDR/NDR/XDR or RoCE Ethernet at a port speed."""

    port_gbps: float = Field(gt=0)
    default_switch: str

    @property
    def port_bw_Bps(self) -> float:
        """One port, one direction, bytes/s."""
        return self.port_gbps * 1e9 / 8.0


class Switch(_Entry):
    """A fixed-configuration switch: logical ports and ports per cage at each speed."""

    ports_by_gbps: dict[int, int]
    ports_per_cage: dict[int, int]

    def radix(self, port_gbps: float) -> int | None:
        """Logical ports at ``port_gbps`` (None when the switch has no such speed)."""
        return self.ports_by_gbps.get(int(port_gbps))

    def cage_ports(self, port_gbps: float) -> int:
        return self.ports_per_cage.get(int(port_gbps), 1)


class _Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    fabrics: dict[str, FabricTech]
    switches: dict[str, Switch]


@cache
def _catalog() -> _Catalog:
    text = resources.files("gpuscale.catalog").joinpath("data", "fabrics.yaml").read_text()
    raw = yaml.safe_load(text)
    try:
        for section in ("fabrics", "switches"):
            raw[section] = {k: {**v, "key": k} for k, v in raw[section].items()}
        return _Catalog.model_validate(raw)
    except ValidationError as exc:  # a catalog data bug, not user input
        raise RuntimeError(f"catalog/data/fabrics.yaml: {exc}") from exc


def fabrics() -> dict[str, FabricTech]:
    """The catalog's scale-out fabric technologies by key, from ``data/fabrics.yaml``."""
    return _catalog().fabrics


def switches() -> dict[str, Switch]:
    """The catalog's network switches by key, from ``data/fabrics.yaml``."""
    return _catalog().switches


def _find(name: str, entries: dict[str, FabricTech] | dict[str, Switch]) -> str | None:
    want = name.strip().lower()
    for key, e in entries.items():
        if want in (key, e.name.lower(), *(a.lower() for a in e.aliases)):
            return key
    return None


def get_fabric(name: str, field: str = "fabric.kind") -> FabricTech:
    """A catalog fabric technology by key, name or alias (any case); an unknown name is an error
    on ``field`` listing the known ones."""
    key = _find(name, fabrics())
    if key is None:
        raise unknown(field, name, fabrics())
    return fabrics()[key]


def get_switch(name: str, field: str = "fabric.switch") -> Switch:
    """A catalog switch by key, name or alias (any case); an unknown name is an error on
    ``field`` listing the known ones."""
    key = _find(name, switches())
    if key is None:
        raise unknown(field, name, switches())
    return switches()[key]


def check_switch_for(fabric: FabricTech, switch: Switch, field: str = "fabric.switch") -> int:
    """The switch radix at the fabric's port speed; InputError when they do not fit."""
    fits = [
        k
        for k, s in switches().items()
        if s.protocol == fabric.protocol and s.radix(fabric.port_gbps)
    ]
    if switch.protocol != fabric.protocol or switch.radix(fabric.port_gbps) is None:
        raise InputError(
            field,
            switch.key,
            f"{switch.key} has no {fabric.protocol} ports at {fabric.port_gbps:g} Gb/s "
            f"({fabric.key}); switches that fit: {', '.join(fits)}",
        )
    radix = switch.radix(fabric.port_gbps)
    assert radix is not None
    return radix
