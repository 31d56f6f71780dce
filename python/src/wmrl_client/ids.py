"""The rules for ids and free text, and how a record names itself in an error (the first part of
``topics/validate.go``: ValidID, checkID, checkText, recordName)."""

from __future__ import annotations

import re
import unicodedata

from . import _json as j
from . import contract as c

_ID_RE = re.compile(r"[A-Za-z0-9._\-:@+]*\Z")


def utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def check_id(s: str) -> str:
    """ "" when s is a valid id (1..128 bytes of A-Z a-z 0-9 . _ - : @ +), else the reason."""
    if s == "":
        return "required"
    if utf8_len(s) > c.MAX_ID_LEN:
        return f"longer than {c.MAX_ID_LEN} bytes"
    if not _ID_RE.match(s):
        b = s.encode("utf-8", "surrogatepass")
        for i, ch in enumerate(b):
            if not (chr(ch).isascii() and _ID_RE.match(chr(ch))):
                return f"character {chr(ch)!r} at byte {i} not allowed in an id (allowed: A-Z a-z 0-9 . _ - : @ +)"
    return ""


def valid_id(s: str) -> bool:
    """Whether s is a valid wmrl id (topics.ValidID)."""
    return isinstance(s, str) and check_id(s) == ""


def check_text(s: str, maxlen: int, multiline: bool) -> str:
    """ "" when s is at most maxlen bytes of valid UTF-8 without control characters (newline, tab
    and carriage return allowed when multiline), else the reason (topics.checkText)."""
    if utf8_len(s) > maxlen:
        return f"longer than {maxlen} bytes"
    if any("\ud800" <= ch <= "\udfff" for ch in s):
        return "not valid UTF-8"
    pos = 0
    for ch in s:
        if unicodedata.category(ch) == "Cc" and not (multiline and ch in "\n\t\r"):
            return f"control character {ch!r} at byte {pos}"
        pos += utf8_len(ch)
    return ""


def record_name(kind: str, *kv: str) -> str:
    """How errors name a record: its kind and the non-empty key=value pairs (ids Go-quoted when
    they are not valid ids), as topics.recordName does."""
    s = kind
    for i in range(0, len(kv) - 1, 2):
        v = kv[i + 1]
        if not isinstance(v, str) or v == "":
            continue
        if not valid_id(v):
            v = j.go_string(v)
        s += f" {kv[i]}={v}"
    return s
