"""Byte quantities at the edges: parsing what users type and formatting what they read.

Inside gpuplan every size is an integer number of bytes. Units appear only here.
Decimal units (GB = 10**9) are the default, as in the lesson; binary units (GiB = 2**30)
are available on request and always labelled.

A size a user gives is finite, not negative, at most MAX_BYTES, and a size that is not zero
but rounds to zero bytes ('0.4B', '5e-324GB') is an error, never a silent 0.
"""

from __future__ import annotations

import math
import re

from gpuplan.errors import GpuplanError

DECIMAL = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
BINARY = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_FACTORS = {**DECIMAL, **BINARY}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")

UNIT_SYSTEMS = ("GB", "GiB")
MAX_BYTES = 10**15  # 1 PB: far above any GPU, host or link a plan describes
MAX_SIZE_TEXT = 64  # characters; '79.2GiB' needs 7


def shown(value: object, limit: int = 40) -> str:
    """`value` as an error message quotes it: its repr, shortened to `limit` characters."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"a {len(str(abs(value)))}-digit number"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def parse_bytes(text: str | int | float, default_unit: str = "GB", allow_zero: bool = False) -> int:
    """Parse '79.2GiB', '80 GB', '81559MiB' or a bare number (in `default_unit`) into bytes."""
    if isinstance(text, bool):
        raise GpuplanError(f"a size is a number of bytes or a string like 80GB, got {text!r}")
    if isinstance(text, int | float):
        value, unit = float(text) if isinstance(text, float) else text, default_unit
    else:
        if len(text) > MAX_SIZE_TEXT:
            raise GpuplanError(
                f"a size is at most {MAX_SIZE_TEXT} characters (like 80GB), got {len(text)}"
            )
        match = _SIZE.match(text)
        if not match:
            raise GpuplanError(
                f"cannot read {shown(text)} as a size; write it like 80GB or 79.2GiB"
            )
        value, unit = float(match.group(1)), match.group(2) or default_unit
        mantissa = re.split("[eE]", match.group(1))[0]
        if value == 0 and mantissa.strip("0."):
            raise GpuplanError(f"size {shown(text)} rounds to 0 bytes")
    factor = _FACTORS.get(unit.upper())
    if factor is None:
        raise GpuplanError(
            f"unknown unit {shown(unit)} in {shown(text)}; use B, MB, GB, TB, MiB, GiB or TiB"
        )
    if isinstance(value, float) and math.isnan(value):
        raise GpuplanError(f"size {shown(text)} is not a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        raise GpuplanError(f"size must be positive, got {shown(text)}")
    if value > MAX_BYTES / factor:
        raise GpuplanError(f"size {shown(text)} is larger than {format_bytes(MAX_BYTES, 'GB', 0)}")
    size = round(value * factor)
    if size == 0 and value != 0:
        raise GpuplanError(f"size {shown(text)} rounds to 0 bytes")
    return size


def format_bytes(n: int | float, units: str = "GB", digits: int = 2) -> str:
    """Format bytes in GB (10**9, default) or GiB (2**30), labelled: '16.06 GB'."""
    if units not in UNIT_SYSTEMS:
        raise GpuplanError(f"unknown units {units!r}; use GB or GiB")
    scale = 10**9 if units == "GB" else 2**30
    return f"{n / scale:,.{digits}f} {units}"


def format_count(n: int | float) -> str:
    """Format a parameter count the way the lesson writes it: 8.03 B, 70.55 B, 494.03 M."""
    if abs(n) >= 10**9:
        return f"{n / 10**9:.2f} B"
    if abs(n) >= 10**6:
        return f"{n / 10**6:.2f} M"
    if abs(n) >= 10**3:
        return f"{n / 10**3:.2f} K"
    return f"{n:g}"


def format_per_token(n: int | float, units: str = "GB") -> str:
    """A per-token size (KV cache per token: a few bytes for a toy model, tens of kB to a few MB
    for real ones) in MB (10**6), or MiB (2**20) with units="GiB": '0.13 MB', '0.125 MiB'; below
    0.1 MB (0.125 MiB) in kB (KiB) with three significant figures, below 1 kB in bytes, so a
    small figure never reads '0.00 MB'."""
    if units not in UNIT_SYSTEMS:
        raise GpuplanError(f"unknown units {units!r}; use GB or GiB")
    if units == "GB":
        if n >= 10**5:
            return f"{n / 10**6:.2f} MB"
        return f"{n / 10**3:.3g} kB" if n >= 10**3 else f"{n:,.0f} B"
    if n >= 2**17:
        return f"{n / 2**20:.3f} MiB"
    return f"{n / 2**10:.3g} KiB" if n >= 2**10 else f"{n:,.0f} B"


# token counts as engines read them (vLLM's human_readable_int): one reader for every flag
MAX_INT = 2**62  # counts and sizes above this are not meant

_COUNT_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_COUNT_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_COUNT_SUFFIXED = re.compile(r"(\d{1,20}(?:\.\d{1,20})?)([kKmMgGtT])")


def human_int(text: str) -> int:
    """An integer as vLLM's human_readable_int reads it: '16k' = 16,000, '4K' = 4,096, '25.6k'
    = 25,600; decimals only with the decimal (lower-case) suffixes; a plain integer otherwise."""
    t = text.strip()
    m = _COUNT_SUFFIXED.fullmatch(t)
    if m:
        number, suffix = m.groups()
        if suffix in _COUNT_DECIMAL:
            value = int(float(number) * _COUNT_DECIMAL[suffix])
        elif "." in number:
            raise ValueError(f"decimals are not allowed with the binary suffix {suffix}")
        else:
            value = int(number) * _COUNT_BINARY[suffix]
    else:
        if not re.fullmatch(r"[+-]?\d{1,20}", t):
            raise ValueError(f"{text!r} is not a whole number")
        value = int(t)
    if abs(value) > MAX_INT:
        raise ValueError(f"{text!r} is too large")
    return value


def ceil_div(a: int, b: int) -> int:
    """⌈a ÷ b⌉ in integers (b > 0)."""
    return -(-a // b)
