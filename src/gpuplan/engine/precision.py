"""Numeric formats and the bytes they take.

A `Precision` is read from the catalog (catalog/data/precisions.toml); its bytes per parameter
is derived here from the payload bits and the per-group scales, never typed in:

    bits/element = bits + (scale_bits + zero_bits) / group_size
                        + scale_scale_bits / (group_size × scale_group)

e.g. GPTQ int4 g128: 4 + (16 + 4)/128 = 4.156 bits = 0.520 bytes; MXFP4: 4 + 8/32 = 4.25 bits;
NF4 with double quantisation (QLoRA §3): 4 + 8/64 + 32/(64·256) = 4.127 bits.

GGML block types (GGUF) are given as whole blocks instead: block_bytes per block_size elements
(Q4_K: 144 bytes per 256 = 4.5 bits), as ggml-common.h lays them out.
"""

from __future__ import annotations

from functools import cache, cached_property
from typing import TYPE_CHECKING

from gpuplan.datafiles import load_data
from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError
from gpuplan.lookup import did_you_mean, normalise
from gpuplan.units import ceil_div

if TYPE_CHECKING:
    from fractions import Fraction


@record(cache_hash=True)  # bills are cached by it: a deep hash of every field, once per object
class Precision:
    """A storage format: payload bits per element plus any per-group scales and zero points."""

    id: str
    bits: int
    group_size: int = 0
    scale_bits: int = 0
    zero_bits: int = 0
    scale_group: int = 0
    scale_scale_bits: int = 0
    block_size: int = 0  # GGML block types: elements per block ...
    block_bytes: int = 0  # ... and the bytes one block takes
    scope: str = "all"  # "all": every parameter; "linear": only linear weights are packed
    kv: bool = False
    source: str = ""

    @cached_property
    def bits_per_param(self) -> Fraction:
        """Average bits per element, scales and zero points included (exact: a Fraction)."""
        from fractions import Fraction  # imported on first use: a catalog query never needs it

        if self.block_size:
            return Fraction(self.block_bytes * 8, self.block_size)
        bits = Fraction(self.bits)
        if self.group_size:
            bits += Fraction(self.scale_bits + self.zero_bits, self.group_size)
            if self.scale_group:
                bits += Fraction(self.scale_scale_bits, self.group_size * self.scale_group)
        return bits

    @cached_property
    def bytes_per_param(self) -> Fraction:
        return self.bits_per_param / 8

    def bytes_for(self, n: int) -> int:
        """Bytes to store `n` elements, scales included, rounded up to a whole byte."""
        if n <= 0:
            return 0
        if self.block_size:
            return ceil_div(n, self.block_size) * self.block_bytes
        bits = n * self.bits
        if self.group_size:
            groups = ceil_div(n, self.group_size)
            bits += groups * (self.scale_bits + self.zero_bits)
            if self.scale_group:
                bits += ceil_div(groups, self.scale_group) * self.scale_scale_bits
        return ceil_div(bits, 8)

    @cached_property
    def bytes_per_element(self) -> float:
        """`bytes_per_param` as a float, for display and float arithmetic (a plain format's is
        bits ÷ 8, found without importing `fractions`: a cold `serve` never needs it)."""
        if not (self.block_size or self.group_size):
            return self.bits / 8
        return float(self.bytes_per_param)

    @cached_property
    def _described(self) -> str:
        if self.block_size or self.group_size:
            whole = self.bytes_per_param.denominator in (1, 2, 4, 8)
        else:
            whole = True  # whole bits: an exact multiple of 1/8 byte
        b = self.bytes_per_element
        text = f"{b:g}" if whole else f"{b:.3f}"
        return f"{self.id} ({text} bytes/param)"

    def describe(self) -> str:
        """'bf16 (2 bytes/param)' or 'gptq-int4-g128 (0.520 bytes/param)'."""
        return self._described


# ---------------------------------------------------------------- the table (precisions.toml)

_FIELDS = (
    "bits",
    "group_size",
    "scale_bits",
    "zero_bits",
    "scale_group",
    "scale_scale_bits",
    "block_size",
    "block_bytes",
    "scope",
    "kv",
    "source",
)


@cache
def _table() -> tuple[dict[str, Precision], dict[str, str]]:
    by_id: dict[str, Precision] = {}
    names: dict[str, str] = {}
    for row in load_data("precisions.toml")["precision"]:
        p = Precision(id=row["id"], **{k: row[k] for k in _FIELDS if k in row})
        by_id[p.id] = p
        for alias in [p.id, *row.get("aliases", [])]:
            names[normalise(alias)] = p.id
    return by_id, names


def list_precisions() -> list[Precision]:
    return list(_table()[0].values())


def get_precision(name: str, for_kv: bool = False) -> Precision:
    """A precision by id or alias ('bf16', 'bfloat16', 'awq', 'nf4-dq', ...)."""
    by_id, names = _table()
    key = names.get(normalise(name))
    if key is None:
        raise did_you_mean("precision", name, names)
    p = by_id[key]
    if for_kv and not p.kv:
        kv_ok = ", ".join(x.id for x in by_id.values() if x.kv)
        raise GpuplanError(f"{p.id} is not a KV-cache dtype; use one of {kv_ok}")
    return p


def torch_dtype_precision(torch_dtype: str) -> Precision:
    """The precision a checkpoint's `torch_dtype` names (float32 → fp32, bfloat16 → bf16...)."""
    mapping = {
        "float32": "fp32",
        "float16": "fp16",
        "bfloat16": "bf16",
        "float": "fp32",
        "half": "fp16",
    }
    return get_precision(mapping.get(torch_dtype, "bf16"))
