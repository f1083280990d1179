"""Typed values of a Hugging Face ``config.json``, each checked and named in the error it
raises, and how messages name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscale.errors import InputError

DROPOUT_KEYS = (
    "resid_pdrop",  # GPT-2
    "embd_pdrop",
    "emb_pdrop",
    "dropout",  # OPT
    "hidden_dropout",  # BLOOM, Falcon
    "hidden_dropout_prob",
    "residual_dropout",
    "embedding_dropout",
)
"""The keys config files give hidden-state dropout probabilities under. Attention dropout
(attn_pdrop, attention_dropout) is not among them: flash attention keeps no mask for it,
regenerating it from the RNG state in the backward."""


def snapshot_name(path: Path) -> str:
    """The model a config.json belongs to: its folder (falcon-7b/config.json), or in a
    Hugging Face cache (models--tiiuae--falcon-7b/snapshots/<commit>/config.json, where the
    file links to a blob) the repository's name; links are not followed. Empty for a file
    not named config.json or one without a folder."""
    if path.stem != "config":
        return ""
    folder = path.absolute().parent
    repo = folder.parent.parent.name
    if folder.parent.name == "snapshots" and repo.startswith("models--"):
        return repo.rsplit("--", 1)[-1]
    return folder.name


def where(path: Path) -> str:
    """How messages name a config file: a snapshot's config.json with its model
    (falcon-7b/config.json), any other file by its name."""
    name = snapshot_name(path)
    return f"{name}/{path.name}" if name else path.name


def first_of(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The value of the first of ``names`` the config gives (not null), else ``default``."""
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


FIELD_KEYS = {
    "layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "vocab": "vocab_size",
    "max_seq": "max_position_embeddings", "ffn_hidden": "moe_intermediate_size",
    "dense_ffn_hidden": "intermediate_size_mlp", "num_experts": "num_local_experts",
    "top_k": "num_experts_per_tok", "route_groups": "n_group", "route_topk_groups": "topk_group",
    "moe_latent": "moe_latent_size", "mtp_layers": "num_nextn_predict_layers",
}  # fmt: skip
"""A catalog field and the first of the config.json keys it is read from (the key a file
used is in :attr:`Ints.found`)."""


class Ints:
    """Integer keys of one config file, each checked and named in the error it raises."""

    def __init__(self, cfg: dict[str, Any], path: Path) -> None:
        self.cfg, self.path = cfg, path
        self.found: dict[str, str] = {}
        """The key each value was read from, by the first of the names asked for."""
        self.layers = 0
        """The model's layers, once read: a per-layer list must hold one value each."""

    def __call__(
        self, *names: str, default: int = 0, minimum: int = 0, per_layer: bool = False
    ) -> int:
        """The first of ``names`` the file gives, an integer of at least ``minimum``, else
        ``default``; ``per_layer``: a list of one value per layer (Hunyuan's
        ``moe_topk``) is read when every entry is the same (gpuscale models one size for
        all the layers of a kind)."""
        for n in names:
            val = self.cfg.get(n)
            if val is None:
                continue
            self.found[names[0]] = n
            if per_layer and isinstance(val, list) and val:
                if self.layers and len(val) != self.layers:
                    raise InputError(
                        f"{where(self.path)}:{n}",
                        val,
                        f"a number, or a list of {self.layers} (one for each layer)",
                    )
                if any(v != val[0] for v in val):
                    raise InputError(
                        f"{where(self.path)}:{n}",
                        val,
                        "one value for every layer (per-layer sizes that differ are not modelled)",
                    )
                val = val[0]
            # JSON true/false are not sizes; 32.0 is accepted as 32
            ok = not isinstance(val, bool) and (
                isinstance(val, int) or (isinstance(val, float) and val.is_integer())
            )
            if not ok or int(val) < minimum:
                raise InputError(
                    f"{where(self.path)}:{n}", val, f"an integer of at least {minimum}"
                )
            return int(val)
        return default

    def trains_with_dropout(self) -> bool:
        """Whether any hidden-state dropout key (GPT-2's resid_pdrop, OPT's dropout, BLOOM's
        and Falcon's hidden_dropout...) is above 0: its masks are kept for the backward."""
        for n in DROPOUT_KEYS:
            val = self.cfg.get(n)
            if val is None:
                continue
            if isinstance(val, bool) or not isinstance(val, int | float) or not 0 <= val < 1:
                raise InputError(f"{where(self.path)}:{n}", val, "a probability, 0 <= p < 1")
            if val > 0:
                return True
        return False

    def flag(self, name: str, default: bool) -> bool:
        """A true/false key: JSON true or false only ("false" as a string is an error)."""
        val = self.cfg.get(name)
        if val is None:
            return default
        if not isinstance(val, bool):
            raise InputError(f"{where(self.path)}:{name}", val, "true or false (JSON booleans)")
        return val
