"""The system-check IDs, defined once, and ``Problem``: one finding about the configuration.

Every ID is listed in docs/reference/checks.md. Ranges: E001-E019 policies and top-level
settings, E020-E029 surfaces, E030-E039 policy plane, E040-E049 resilience, E050-E059
leases, E060-E069 DRF throttles, E070-E079 load shedding,
E080-E089 multi-region budgets, E090-E099 concurrency limits, E100-E109 shaping
(``max_wait``), E110-E119 the off switch and the test kit (``ENABLED``), E120-E129
exemptions and deny lists, E130-E139 / W130-W139 metered costs and calendar quotas,
E140-E149 frameworks and signals (OpenTelemetry).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Codes", "Problem"]


class Codes:
    NOT_A_DICT = "django_gcra.E001"
    BAD_RATE = "django_gcra.E002"
    BAD_BURST = "django_gcra.E003"
    BAD_KEY = "django_gcra.E004"
    NO_LIMITS = "django_gcra.E005"
    CACHE_MISSING = "django_gcra.E006"
    CACHE_NOT_REDIS = "django_gcra.E007"
    DUPLICATE_LIMIT = "django_gcra.E008"
    BAD_CHOICE = "django_gcra.E009"
    BAD_NAME = "django_gcra.E010"
    BAD_SHARD = "django_gcra.E011"
    BAD_FALLBACK_RATE = "django_gcra.E012"
    BAD_DESCRIPTOR_PATH = "django_gcra.E013"
    BAD_LEASE = "django_gcra.E014"
    BAD_DEFAULT_TIER = "django_gcra.E015"
    UNKNOWN_KEY = "django_gcra.E016"
    SLIDING_BURST = "django_gcra.E017"
    SLIDING_LOG_TOO_LARGE = "django_gcra.E018"
    UNKNOWN_SETTING = "django_gcra.W001"
    ONE_SLOT = "django_gcra.W002"

    BAD_HEADERS = "django_gcra.E020"
    BAD_DENIED_VIEW = "django_gcra.E021"
    BAD_IPV6_PREFIX = "django_gcra.E022"
    BAD_TRUSTED_PROXIES = "django_gcra.E023"
    BAD_ROUTE = "django_gcra.E024"
    ROUTE_UNKNOWN_POLICY = "django_gcra.E025"
    VIEW_UNKNOWN_POLICY = "django_gcra.E026"
    NO_MIDDLEWARE = "django_gcra.W020"
    MIDDLEWARE_BEFORE_AUTH = "django_gcra.W021"

    BAD_AUDIT = "django_gcra.E030"
    BAD_OVERRIDE_TIMING = "django_gcra.E031"
    STALE_OVERRIDE = "django_gcra.W030"
    OVERRIDE_TTL_SHORT = "django_gcra.W031"

    BAD_TIMEOUT = "django_gcra.E040"
    BAD_BREAKER = "django_gcra.E041"
    BAD_FALLBACK_PROCESSES = "django_gcra.E042"
    BAD_FALLBACK_LOG_INTERVAL = "django_gcra.E043"
    BAD_CLUSTER_NODES = "django_gcra.E044"
    SLOW_TIMEOUT = "django_gcra.W040"
    LOCAL_FULL_RATE = "django_gcra.W041"

    LEASE_COMPOSITE = "django_gcra.E050"
    LEASE_TOO_BIG = "django_gcra.E051"
    BAD_LOW_WATER = "django_gcra.E052"
    BAD_LEASE_MAX_KEYS = "django_gcra.E053"
    LEASE_SLIDING = "django_gcra.E054"
    LEASE_LOW_RATE = "django_gcra.W050"
    LEASE_SHADOW = "django_gcra.W051"

    DRF_RATES_NOT_A_DICT = "django_gcra.E060"
    DRF_BAD_RATE = "django_gcra.E061"
    DRF_BAD_CLASS_PATH = "django_gcra.E062"
    DRF_THROTTLE_UNMADE = "django_gcra.E063"
    DRF_FIRST_LETTER_PERIOD = "django_gcra.W060"
    DRF_PROXIES_DISAGREE = "django_gcra.W061"
    DRF_UNHONOURED_OVERRIDE = "django_gcra.W062"
    DRF_ZERO_RATE = "django_gcra.W063"

    SHED_NOT_A_DICT = "django_gcra.E070"
    SHED_UNKNOWN_KEY = "django_gcra.E071"
    BAD_MAX_IN_FLIGHT = "django_gcra.E072"
    BAD_MIN_IN_FLIGHT = "django_gcra.E073"
    BAD_ADAPTIVE = "django_gcra.E074"
    BAD_EXEMPT = "django_gcra.E075"
    BAD_SHED_RETRY_AFTER = "django_gcra.E076"
    BAD_SHED_INTERVAL = "django_gcra.E077"
    BAD_MIN_RTT_SAMPLES = "django_gcra.E078"
    BAD_SHED_FRACTION = "django_gcra.E079"

    BAD_REGIONS = "django_gcra.E080"
    REGION_UNKNOWN_ALIAS = "django_gcra.E081"
    REGION_LOCAL_UNKNOWN = "django_gcra.E082"
    BAD_REBALANCE_INTERVAL = "django_gcra.E083"
    BAD_BUDGET = "django_gcra.E084"
    BAD_FIXED_SHARES = "django_gcra.E085"
    BAD_REGION_TUNING = "django_gcra.E086"
    REGION_CACHE_ALIAS = "django_gcra.E087"
    BAD_HOME = "django_gcra.E088"
    BUDGET_WITHOUT_REGIONS = "django_gcra.W080"

    BAD_MAX_WAIT = "django_gcra.E100"
    MAX_WAIT_TOO_LONG = "django_gcra.E101"
    MAX_WAIT_NEVER_WAITS = "django_gcra.W100"
    BAD_CONCURRENCY = "django_gcra.E090"
    BAD_CONCURRENCY_KEY = "django_gcra.E091"
    BAD_CONCURRENCY_MAX = "django_gcra.E092"
    BAD_CONCURRENCY_TTL = "django_gcra.E093"
    CONCURRENCY_LEASE = "django_gcra.E094"
    CONCURRENCY_LOCAL_GLOBAL = "django_gcra.W090"

    BAD_ENABLED = "django_gcra.E110"
    LIMITER_DISABLED = "django_gcra.W110"
    BAD_OTEL = "django_gcra.E140"
    OTEL_MISSING = "django_gcra.E141"
    BAD_ACCESS_RULES = "django_gcra.E120"
    BAD_ACCESS_RULE = "django_gcra.E121"
    ACCESS_UNKNOWN_DESCRIPTOR = "django_gcra.E122"
    BAD_ACCESS_VALUES = "django_gcra.E123"
    BAD_ACCESS_NETWORK = "django_gcra.E124"
    BAD_ACCESS_CALLABLE = "django_gcra.E125"
    STALE_ACCESS_RULE = "django_gcra.W120"
    QUOTA_BAD_PERIOD = "django_gcra.E130"
    QUOTA_BAD_TZ = "django_gcra.E131"
    QUOTA_BAD_VALUE = "django_gcra.E132"
    QUOTA_WITH_RATE = "django_gcra.E133"
    QUOTA_LEASE = "django_gcra.E134"
    QUOTA_KEYS_ON_RATE = "django_gcra.E135"
    BAD_SETTLE = "django_gcra.E136"


@dataclass(frozen=True)
class Problem:
    """One finding: an error (the limiter refuses to run) or a warning."""

    id: str  # one of Codes
    msg: str
    hint: str | None = None

    @property
    def is_error(self) -> bool:
        return ".E" in self.id
