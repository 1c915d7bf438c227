"""Pinned constants are stored exactly: integers, booleans, names, or floats as bit patterns
("f32:0x3f800000", "f64:0x3ff0000000000000"). A decimal float in a contract is an error,
because its parse is the reader's business and its bits are not pinned by the text."""
import struct

_FLOAT_FORMATS = {"f32": ("<I", "<f", 8), "f64": ("<Q", "<d", 16)}


def decode_constant(name: str, value):
    """The Python value of one pinned constant; ValueError names the constant if malformed."""
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        raise ValueError(f"constant {name!r}: decimal float {value!r} is not exact; "
                         f"store it as a bit pattern, e.g. {encode_float(value, 'f32')!r}")
    if isinstance(value, str):
        prefix, _, digits = value.partition(":")
        if prefix in _FLOAT_FORMATS and digits.startswith("0x"):
            int_fmt, float_fmt, width = _FLOAT_FORMATS[prefix]
            if len(digits) != 2 + width:
                raise ValueError(f"constant {name!r}: {value!r} needs {width} hex digits")
            return struct.unpack(float_fmt, struct.pack(int_fmt, int(digits, 16)))[0]
        if value.isidentifier():
            return value
    raise ValueError(f"constant {name!r}: {value!r} is not an int, bool, name or float bit pattern")


def encode_float(value: float, kind: str = "f32") -> str:
    """The exact text form of a float constant."""
    int_fmt, float_fmt, width = _FLOAT_FORMATS[kind]
    bits = struct.unpack(int_fmt, struct.pack(float_fmt, value))[0]
    return f"{kind}:0x{bits:0{width}x}"
