"""How this process has been answering while the store fails: ``status()``.

The failure policy itself (``on_failure``: open, closed, local) is ``failure.py``; its
counters, the circuit breakers and the concurrency slots belong to the engine in force.
"""

from __future__ import annotations

from .engine import current

__all__ = ["status"]


def status() -> dict[str, object]:
    """This process's fallback counters and circuit breakers, for a health check or a
    monitoring view inside the serving process (a management command is another process);
    ``slots``: its concurrency slots (held now; acquired, released, refused, expired...).
    Counted since the settings last changed (a new configuration builds a new engine)."""
    return current().status()
