"""Descriptors: the request attributes a limit's key is built from."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string


@functools.cache
def resolve_custom(path: str) -> Callable[[Any], Any]:
    """Import a ``DESCRIPTORS`` callable; ``ImportError`` names the path."""
    try:
        func = import_string(path)
    except ImportError as exc:
        raise ImportError(f"could not import {path!r}: {exc}") from exc
    if not callable(func):
        raise ImportError(f"{path!r} is not callable")
    return func
