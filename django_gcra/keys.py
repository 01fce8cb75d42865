"""Redis keys: ``<prefix>:{<shard value>}:<policy>:<limit>:<values>``.

Every key of one decision carries the same hash tag, so a composite decision lands in
one Redis Cluster slot. Values are escaped so that no value can end the hash tag,
inject a separator, or collide with another value: unreserved ASCII stays as it is,
every other byte is percent-encoded, the empty string is a lone ``%``, and a value
whose escaped form is long is replaced by ``#`` and its SHA-256 (escaping never yields
a lone ``%`` nor a leading ``#``, so the three forms cannot meet). Unicode is normalised
to NFC first, so the composed and decomposed spellings of one name share a bucket; a lone
surrogate is encoded as it is (``surrogatepass``), never an error.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import quote

__all__ = ["build_key", "escape"]

MAX_ESCAPED = 128
_SAFE = "@"  # besides letters, digits and "_.-~", which quote() never escapes
_PLAIN = re.compile(r"[A-Za-z0-9_.\-~@]{1,%d}" % MAX_ESCAPED)  # values quote() leaves as they are


def escape(value: str) -> str:
    """An injective, separator-free, brace-free encoding of one descriptor value."""
    if _PLAIN.fullmatch(value):
        return value  # the common case (ids, IPv4 addresses), without quote()'s cost
    if value == "":
        return "%"
    raw = unicodedata.normalize("NFC", value).encode("utf-8", "surrogatepass")
    escaped = quote(raw, safe=_SAFE)
    if len(escaped) > MAX_ESCAPED:
        return "#" + hashlib.sha256(raw).hexdigest()
    return escaped


def build_key(prefix: str, shard: str, policy: str, limit: str, values: Sequence[str]) -> str:
    """The key of one limit for one set of descriptor values (already escaped by the caller)."""
    return f"{prefix}:{{{shard}}}:{policy}:{limit}:{':'.join(values)}"
