"""One way to show untrusted text (a run folder's name, a manifest value, an exporter's
error): every character that is not printable, and every byte that is not UTF-8, as a
backslash escape, so a name can neither forge a line nor stop an encoder.

A run folder is written by other users: its name may hold any bytes but ``/`` and NUL
(Python hands the undecodable ones over as lone surrogates, ``surrogateescape``) and its
manifest any text. ``shown`` is applied wherever such text is printed or written: the
progress and summary lines, ``status.json`` and ``/metrics`` labels. What it gives is
printable UTF-8 that round-trips by the rules below:

* a byte that is not UTF-8 -> ``\\xNN`` (``\\xff``: always 80 to ff);
* ``\\n``, ``\\r``, ``\\t`` -> themselves escaped; any other character that is not
  printable -> ``\\xNN`` for an ASCII control (ESC is ``\\x1b``), else ``\\uNNNN`` or
  ``\\UNNNNNNNN`` by its code point (line separators, format characters, C1 controls);
* a backslash -> ``\\\\``, so an escape in the output was never in the input.
"""

from __future__ import annotations

__all__ = ["shown"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def shown(text: str) -> str:
    """``text`` with every non-printable character and undecodable byte escaped."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    if char.isprintable():
        return char
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
