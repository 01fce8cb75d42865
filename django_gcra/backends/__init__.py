"""Storage backends: one atomic composite GCRA decision per call."""

from .base import Backend, BackendError, LimitSpec, Outcome

__all__ = ["Backend", "BackendError", "LimitSpec", "Outcome"]
