"""django_gcra: exact, race-free GCRA rate limiting for Django, in one Redis round trip."""

from .decision import Decision
from .limiter import adecide, decide
from .reset import areset, reset
from .shaping import SlotRefused, apace, pace

__all__ = ["Decision", "SlotRefused", "adecide", "apace", "areset", "decide", "pace", "reset"]
__version__ = "0.1.0"
