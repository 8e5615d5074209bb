"""Shared helpers: protobuf text parsing with clear errors, float32 values as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from google.protobuf import text_format

from hpcdl.caffe.proto import message
from hpcdl.errors import HpcdlError


def f32(value: float) -> float:
    """A float32 proto value as the shortest decimal that reads back to it (0.001, not 0.0010000000474974513)."""
    return float(np.format_float_positional(np.float32(value), unique=True, trim="-"))


def read_text(path: str | Path, kind: str, lenient: bool = False):
    """Parse a protobuf text file into caffe.<kind> with protobuf's text_format."""
    path = Path(path)
    if not path.is_file():
        raise HpcdlError(f"{path}: no such file")
    text = path.read_text(errors="replace")
    msg = message(kind)
    try:
        text_format.Parse(text, msg, allow_unknown_field=lenient)
    except text_format.ParseError as exc:
        raise HpcdlError(f"{path}:{_where(exc)}: {_reason(exc)}") from None
    return msg, text


def _where(exc) -> str:
    line, col = exc.GetLine(), exc.GetColumn()
    return f"{line}:{col}" if line is not None else "?"


def _reason(exc) -> str:
    # protobuf prefixes "line:col : " to the message; the path:line:col above replaces it
    return re.sub(r"^\d+:\d+ : ", "", str(exc))


_LAYER_RE = re.compile(r"^\s*layers?\s*[{<]|^\s*layers?\s*:\s*[{<]")


def layer_lines(text: str, field: str = "layer") -> list[int]:
    """1-based line of each top-level `layer {` (or `layers {`) block, in file order.

    Only for messages: the layers themselves are parsed by text_format; this finds
    where each one starts so an error can name its line.
    """
    lines, depth = [], 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if depth == 0 and re.match(rf"^\s*{field}\s*:?\s*[{{<]", line):
            lines.append(n)
        depth += line.count("{") + line.count("<") - line.count("}") - line.count(">")
    return lines


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for ch in line:
        if quote:
            out.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
    # drop quoted text so braces inside strings do not count
    return re.sub(r"\"[^\"]*\"|'[^']*'", '""', "".join(out))
