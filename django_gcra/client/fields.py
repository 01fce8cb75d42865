"""Parsing the server's signals: ``Retry-After`` and the draft-11 ``RateLimit`` field.

Pure functions of strings and numbers (no HTTP library, no Django), shared by every
front-end of :mod:`django_gcra.client`.
"""

from __future__ import annotations

import re
from datetime import timezone
from email.utils import parsedate_to_datetime

__all__ = ["parse_http_date", "parse_retry_after", "parse_sf_list", "ratelimit_items"]

_DELTA = re.compile(r"\d+(?:\.\d+)?")


def parse_http_date(value: str) -> float | None:
    """An HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms) as a Unix
    timestamp, or None when it is not one. A date without a zone is taken as UTC."""
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # Python < 3.10 returned None instead of raising
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value, or None when absent or unparseable.

    ``value`` is delta-seconds (``"120"``; a decimal such as ``"1.5"`` is tolerated) or an
    HTTP-date (``"Wed, 21 Oct 2026 07:28:00 GMT"``), which is read relative to ``now``
    (a Unix timestamp: the response's ``Date`` header when it has one, so a skewed local
    clock does not matter). A date in the past means no wait (0.0).
    """
    if value is None:
        return None
    value = value.strip()
    if _DELTA.fullmatch(value):
        return float(value)
    when = parse_http_date(value)
    if when is None:
        return None
    return max(0.0, when - now)


# A small RFC 9651 (Structured Fields) List parser: enough for RateLimit and
# RateLimit-Policy, strict enough that a malformed field is ignored as a whole (9651 s4.2).
_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*")
_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_NUMBER = re.compile(r"-?\d{1,15}(?:\.\d{1,3})?")
_BYTES = re.compile(r":([A-Za-z0-9+/=]*):")


class _Invalid(ValueError):
    pass


def _bare_item(text: str, i: int) -> tuple[object, int]:
    if i >= len(text):
        raise _Invalid("item expected")
    c = text[i]
    if c == '"':
        out, i = [], i + 1
        while i < len(text):
            c = text[i]
            if c == "\\":
                if i + 1 >= len(text) or text[i + 1] not in '"\\':
                    raise _Invalid("bad escape")
                out.append(text[i + 1])
                i += 2
            elif c == '"':
                return "".join(out), i + 1
            elif not " " <= c <= "~":
                raise _Invalid("bad character in string")
            else:
                out.append(c)
                i += 1
        raise _Invalid("unterminated string")
    if c == "?":
        if text[i + 1:i + 2] in ("0", "1"):
            return text[i + 1] == "1", i + 2
        raise _Invalid("bad boolean")
    match = _NUMBER.match(text, i)
    if match:
        raw = match.group()
        if "." in raw and len(raw.split(".")[0].lstrip("-")) > 12:
            raise _Invalid("decimal too long")
        return (float(raw) if "." in raw else int(raw)), match.end()
    match = _TOKEN.match(text, i)
    if match:
        return match.group(), match.end()
    match = _BYTES.match(text, i)
    if match:  # kept as its base64 text: no RateLimit parameter we read is a byte sequence
        return match.group(1), match.end()
    raise _Invalid(f"unexpected {c!r}")


def _parameters(text: str, i: int) -> tuple[dict[str, object], int]:
    params: dict[str, object] = {}
    while i < len(text) and text[i] == ";":
        i += 1
        while i < len(text) and text[i] == " ":
            i += 1
        match = _KEY.match(text, i)
        if not match:
            raise _Invalid("parameter key expected")
        key, i = match.group(), match.end()
        value: object = True
        if i < len(text) and text[i] == "=":
            value, i = _bare_item(text, i + 1)
        params[key] = value
    return params, i


def parse_sf_list(value: str | None) -> list[tuple[object, dict[str, object]]]:
    """An RFC 9651 List of items as ``[(item, {param: value})]``; ``[]`` when absent or
    malformed. Inner lists are not supported (no RateLimit field uses them): a field with
    one is treated as malformed."""
    if not value:
        return []
    text, items, i = value.strip(" \t"), [], 0
    try:
        while i < len(text):
            item, i = _bare_item(text, i)
            params, i = _parameters(text, i)
            items.append((item, params))
            while i < len(text) and text[i] in " \t":
                i += 1
            if i == len(text):
                break
            if text[i] != ",":
                raise _Invalid("comma expected")
            i += 1
            while i < len(text) and text[i] in " \t":
                i += 1
            if i == len(text):
                raise _Invalid("trailing comma")
    except _Invalid:
        return []
    return items


def ratelimit_items(value: str | None) -> list[tuple[str, int, int | None]]:
    """The draft-11 ``RateLimit`` field as ``[(policy name, r, t or None)]``; items without
    a valid non-negative integer ``r`` (or whose name is not a string) are skipped."""
    out = []
    for name, params in parse_sf_list(value):
        r, t = params.get("r"), params.get("t")
        if not isinstance(name, str) or isinstance(r, bool) or not isinstance(r, int) or r < 0:
            continue
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            t = None
        out.append((name, r, t))
    return out
