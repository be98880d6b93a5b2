"""Kubernetes resource quantities (apimachinery ``resource.Quantity``) as integers of bytes."""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["memory_bytes"]

_QUANTITY = re.compile(
    r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?)$"
)
_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def memory_bytes(value: object) -> int | None:
    """Bytes of a Kubernetes memory quantity (apimachinery ``resource.Quantity``: binary
    ``Ki``..``Ei``, decimal ``k``..``E``, an exponent ``e3``, milli ``m``), rounded up; None
    when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    number, exponent, suffix = match.groups()
    amount = Fraction(number)
    if exponent:
        power = int(exponent[1:])
        if abs(power) > 30:
            return None
        amount *= Fraction(10) ** power
    elif suffix == "m":
        amount /= 1000
    else:
        amount *= _SUFFIX[suffix or ""]
    return -(-amount.numerator // amount.denominator)
