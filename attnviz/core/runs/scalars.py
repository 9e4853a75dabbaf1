"""One conversion at RunConfig's boundary: NumPy scalars and whole floats become Python's own values.

np.int64(4) and 4.0 are whole numbers: an int field takes them as 4. np.float32(0.1) is a number, np.bool_(True)
a truth value, np.str_("causal") text. True/False are refused where an integer or a number is asked for, as are
strings ("4"): the problem says which was given, so the fix is plain.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Converted = tuple[Any, str | None]  # (the value as Python's type, None) or (the value, the problem)


def what(value: Any) -> str:
    """The kind of a value in words: a bool, a string, a list, ..."""
    if isinstance(value, (bool, np.bool_)):
        return "a bool"
    if isinstance(value, (str, bytes)):
        return "a string"
    if value is None:
        return "null"
    name = type(value).__name__
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def to_int(value: Any) -> Converted:
    if isinstance(value, (bool, np.bool_)):  # bool is an int subclass: True would pass as 1
        return value, "must be an integer, not a bool"
    if isinstance(value, (int, np.integer)):
        return int(value), None
    if isinstance(value, (float, np.floating)):
        if math.isfinite(value) and float(value).is_integer():
            return int(value), None
        return value, "must be a whole number"
    return value, f"must be an integer, not {what(value)}"


def to_float(value: Any) -> Converted:
    if isinstance(value, (bool, np.bool_)):
        return value, "must be a number, not a bool"
    if isinstance(value, (int, float)):
        return value, None  # Python's own: kept as given (a saved 10000 stays 10000)
    if isinstance(value, np.integer):
        return int(value), None
    if isinstance(value, np.floating):
        return float(value), None
    return value, f"must be a number, not {what(value)}"


def to_bool(value: Any) -> Converted:
    if isinstance(value, (bool, np.bool_)):
        return bool(value), None
    return value, "must be true or false"


def to_str(value: Any) -> Converted:
    if isinstance(value, str):
        return str(value), None  # np.str_ is a str: plain text from here on
    return value, "must be text"


CONVERTERS = {"int": to_int, "float": to_float, "bool": to_bool, "str": to_str}


def convert(kind: str, value: Any) -> Converted:
    """`value` for a field of type `kind` ("int", "float", "bool", "str"; other kinds pass through)."""
    converter = CONVERTERS.get(kind)
    return converter(value) if converter else (value, None)


def int_tuple(values: Any) -> Any:
    """kv_lengths as given (a list, a tuple, a NumPy array, one number) -> a tuple whose whole numbers are ints
    (anything else stays, for the validator to name)."""
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if isinstance(values, (int, np.integer)) and not isinstance(values, (bool, np.bool_)):
        values = (values,)
    if not isinstance(values, (list, tuple)):
        return values
    out = []
    for v in values:
        number, problem = to_int(v)
        out.append(v if problem else number)
    return tuple(out)
