"""Byte quantities at the edges: parsing what users type and formatting what they read.

Inside gpuplan every size is an integer number of bytes. Units appear only here.
Decimal units (GB = 10**9) are the default, as in the lesson; binary units (GiB = 2**30)
are available on request and always labelled.
"""

from __future__ import annotations

import re

from gpuplan.errors import GpuplanError

DECIMAL = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
BINARY = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_FACTORS = {**DECIMAL, **BINARY}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")

UNIT_SYSTEMS = ("GB", "GiB")


def parse_bytes(text: str | int | float, default_unit: str = "GB", allow_zero: bool = False) -> int:
    """Parse '79.2GiB', '80 GB', '81559MiB' or a bare number (in `default_unit`) into bytes."""
    if isinstance(text, int | float):
        value, unit = float(text), default_unit
    else:
        match = _SIZE.match(text)
        if not match:
            raise GpuplanError(f"cannot read {text!r} as a size; write it like 80GB or 79.2GiB")
        value, unit = float(match.group(1)), match.group(2) or default_unit
    factor = _FACTORS.get(unit.upper())
    if factor is None:
        raise GpuplanError(f"unknown unit {unit!r} in {text!r}; use B, MB, GB, TB, MiB, GiB or TiB")
    if value < 0 or (value == 0 and not allow_zero):
        raise GpuplanError(f"size must be positive, got {text!r}")
    return round(value * factor)


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
