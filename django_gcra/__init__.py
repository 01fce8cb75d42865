"""django_gcra: exact, race-free GCRA rate limiting for Django, in one Redis round trip."""

from .decision import Decision
from .limiter import adecide, decide

__all__ = ["Decision", "adecide", "decide"]
__version__ = "0.1.0"
