"""The ``DJANGO_GCRA`` setting: one typed, frozen ``Settings`` object built in one place.

``get_settings()`` returns it (built on first use, rebuilt when ``DJANGO_GCRA`` or
``CACHES`` changes, so ``override_settings`` works) and raises ``ImproperlyConfigured``
if any setting is in error. ``problems()`` lists every finding (errors and warnings):
the system checks are made from it. Parts that cache state derived from the settings
register a callback with ``on_change``; the one ``setting_changed`` receiver here calls them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from .budgets import RegionSettings, budget_problems, parse_regions
from .codes import Codes, Problem
from .policy import Policy, is_known_descriptor, parse_policy
from .routes import Route, parse_routes
from .rules import DENY, EXEMPT, RuleSet, parse_rules
from .validation import is_int, is_number

__all__ = ["AUDIT_DEFAULTS", "DEFAULTS", "SHEDDING_DEFAULTS", "AuditSettings", "BreakerSettings", "Settings",
           "SheddingSettings", "forget_built", "get_settings", "on_change", "problems"]

AUDIT_DEFAULTS: dict[str, Any] = {
    "ENABLED": True,
    "FLUSH_INTERVAL": 2.0,  # seconds between writes
    "MAX_BUFFER": 10_000,  # distinct (policy, limit, key, outcome) entries held between writes
    "RETENTION_DAYS": 30,  # gcra_prune_audit deletes older rows
}
BREAKER_DEFAULTS: dict[str, Any] = {"failures": 5, "cooldown": 1.0}
# Load shedding (docs/howto/shedding.md): LoadSheddingMiddleware's per-process cap. The
# adaptive limit is Envoy's adaptive-concurrency gradient controller; its defaults are Envoy's.
SHEDDING_DEFAULTS: dict[str, Any] = {
    "max_in_flight": 64,  # the cap on requests in flight in this process (the adaptive limit's ceiling)
    "adaptive": True,  # lower the cap when latency rises (gradient controller)
    "min_in_flight": 3,  # the adaptive limit's floor (Envoy's min_concurrency)
    "exempt": [],  # path regexes (re.search on path_info) never shed, e.g. r"^/health/"
    "retry_after": 1,  # seconds, sent with every 503
    "sample_interval": 0.1,  # seconds of latency samples per limit update (concurrency_update_interval)
    "min_rtt_interval": 60.0,  # seconds between minRTT measurements
    "min_rtt_samples": 50,  # requests measured at the floor for one minRTT (request_count)
    "buffer": 0.25,  # latency above minRTT tolerated before the limit falls (min_rtt buffer)
    "jitter": 0.15,  # minRTT measurements are delayed by up to this fraction of min_rtt_interval
}

DEFAULTS: dict[str, Any] = {
    "ENABLED": True,  # False: every decision is allowed without the store (tests, local development)
    "CACHE_ALIAS": "default",
    "KEY_PREFIX": "rl",
    "DESCRIPTORS": {},
    "POLICIES": {},
    "ROUTES": [],
    "TRUSTED_PROXIES": 0,
    "DEFAULT_TIER": None,
    # Policy plane (overrides, audit): docs/policy-plane.md
    "OVERRIDE_REFRESH": 1.0,  # seconds between checks of the override version stamp in Redis
    "OVERRIDE_TTL": 30.0,  # seconds after which overrides are reloaded even if the stamp is unreadable
    "AUDIT": AUDIT_DEFAULTS,
    # Surfaces: docs/surfaces/
    "HEADERS": "draft-11",  # draft-11 | draft-03 | x-ratelimit | github | none, or a list of styles
    "DENIED_VIEW": None,  # dotted path: (request, decision) -> HttpResponse
    "IPV6_PREFIX": 64,  # IPv6 clients are grouped by this network prefix
    # Resilience (docs/operations.md): the limiter's own Redis timeouts (ms), the circuit
    # breaker per endpoint, and the per-process local fallback.
    "TIMEOUT": 10,
    "CONNECT_TIMEOUT": None,  # None: same as TIMEOUT
    "BREAKER": BREAKER_DEFAULTS,
    "FALLBACK_PROCESSES": 1,
    "FALLBACK_LOG_INTERVAL": 10.0,
    "LEASE_MAX_KEYS": 10_000,  # leased keys kept per policy and process
    "DRF_ALGORITHM": "gcra",  # the GCRA*RateThrottle classes' algorithm when the class names none
    # Multi-region budgets (docs/howto/multi-region.md): {"local", "caches", "rebalance_interval", ...}
    "REGIONS": None,
    "SHEDDING": SHEDDING_DEFAULTS,
    "OTEL": False,  # OpenTelemetry counters and span attributes (docs/howto/opentelemetry.md)
    # Exemptions and deny lists (docs/howto/exempt-and-deny.md): rules of every policy
    "EXEMPT": [],
    "DENY": [],
}

HEADER_STYLES = ("draft-11", "draft-03", "x-ratelimit", "github", "none")
DRF_ALGORITHMS = ("gcra", "sliding_log", "sliding_window")
SLOW_TIMEOUT_MS = 1000  # above this a slow Redis visibly stalls every request (W040)
MAX_SECONDS = 86_400.0  # the longest interval any timing setting may have
MIN_FLUSH_INTERVAL = 0.05  # seconds; a shorter audit flush interval is a busy loop
MAX_RETRY_AFTER = 60  # seconds; shedding answers a momentary overload, so its Retry-After stays small


@dataclass(frozen=True)
class AuditSettings:
    enabled: bool = True
    flush_interval: float = 2.0
    max_buffer: int = 10_000
    retention_days: float = 30


@dataclass(frozen=True)
class BreakerSettings:
    failures: int = 5  # consecutive failures that open the circuit
    cooldown: float = 1.0  # seconds before a probe


@dataclass(frozen=True)
class SheddingSettings:
    max_in_flight: int = 64
    adaptive: bool = True
    min_in_flight: int = 3
    exempt: tuple[re.Pattern[str], ...] = ()
    retry_after: int = 1
    sample_interval: float = 0.1
    min_rtt_interval: float = 60.0
    min_rtt_samples: int = 50
    buffer: float = 0.25
    jitter: float = 0.15


@dataclass(frozen=True)
class Settings:
    """Every ``DJANGO_GCRA`` value, validated, with its default. Times are in seconds."""

    enabled: bool = True  # ENABLED (not AUDIT['ENABLED'])
    cache_alias: str = "default"
    prefix: str = "rl"
    descriptors: Mapping[str, str] = field(default_factory=dict)  # name -> dotted path
    policies: Mapping[str, Policy] = field(default_factory=dict)
    routes: tuple[Route, ...] = ()
    trusted_proxies: int = 0
    default_tier: str | None = None
    override_refresh: float = 1.0
    override_ttl: float = 30.0
    audit: AuditSettings = AuditSettings()
    headers: tuple[str, ...] = ("draft-11",)  # the styles of HEADERS (a string is one style)
    denied_view: str | None = None
    ipv6_prefix: int = 64
    timeout: float = 0.010
    connect_timeout: float = 0.010
    breaker: BreakerSettings = BreakerSettings()
    fallback_processes: int = 1
    fallback_log_interval: float = 10.0
    lease_max_keys: int = 10_000
    drf_algorithm: str = "gcra"
    regions: RegionSettings | None = None  # None: one region, every limit enforced whole
    shedding: SheddingSettings = SheddingSettings()
    otel: bool = False
    access: RuleSet | None = None  # EXEMPT and DENY, compiled (rules.py); None: neither has a rule
    ruled: bool = False  # some rule in EXEMPT, DENY or a policy's own "exempt" / "deny"


class _Reader:
    """Reads one raw mapping, recording a problem for each bad value (and using the default)."""

    def __init__(self, raw: Mapping[str, Any], found: list[Problem]) -> None:
        self.raw, self.found = raw, found

    def get(self, name: str) -> Any:
        return self.raw.get(name, DEFAULTS[name])

    def seconds(self, name: str, code: str, minimum: float = 0.0) -> float:
        value = self.get(name)
        if not is_number(value, minimum, strict=True, maximum=MAX_SECONDS):
            self.found.append(Problem(code, f"DJANGO_GCRA[{name!r}] is {value!r}; it must be a finite number of "
                                      f"seconds above {minimum:g} and at most {MAX_SECONDS:g}."))
            return float(DEFAULTS[name])
        return float(value)


def _dict(value: Any, where: str, found: list[Problem]) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    found.append(Problem(Codes.NOT_A_DICT, f"{where} must be a dict."))
    return {}


def _build() -> tuple[Settings, tuple[Problem, ...]]:
    found: list[Problem] = []
    raw = _dict(getattr(django_settings, "DJANGO_GCRA", {}), "DJANGO_GCRA", found)
    for unknown in sorted(set(raw) - set(DEFAULTS), key=str):
        found.append(Problem(Codes.UNKNOWN_SETTING, f"DJANGO_GCRA has an unknown setting {unknown!r}.",
                             "Check the spelling against the settings reference."))
    read = _Reader(raw, found)
    enabled = read.get("ENABLED")
    if not isinstance(enabled, bool):
        found.append(Problem(Codes.BAD_ENABLED, f"DJANGO_GCRA['ENABLED'] is {enabled!r}; it must be True or False.",
                             "False turns every rate and concurrency limit off (tests, local development)."))
        enabled = True
    prefix = read.get("KEY_PREFIX")
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}"):
        found.append(Problem(Codes.BAD_NAME, f"DJANGO_GCRA['KEY_PREFIX'] {prefix!r} is not valid.",
                             "Use a non-empty string without braces."))
        prefix = DEFAULTS["KEY_PREFIX"]
    descriptors = dict(_dict(read.get("DESCRIPTORS"), "DJANGO_GCRA['DESCRIPTORS']", found))
    policies: dict[str, Policy] = {}
    raw_policies = _dict(read.get("POLICIES"), "DJANGO_GCRA['POLICIES']", found)
    for name, raw_policy in raw_policies.items():
        policy = parse_policy(name, raw_policy, descriptors, found)
        if policy is not None:
            policies[name] = policy
    default_tier = read.get("DEFAULT_TIER")
    if default_tier is not None and not isinstance(default_tier, str):
        found.append(Problem(Codes.BAD_DEFAULT_TIER, f"DJANGO_GCRA['DEFAULT_TIER'] is {default_tier!r}; "
                             "give a tier name (a string) or None."))
        default_tier = None
    found += _tier_problems(policies, default_tier)
    routes = parse_routes(read.get("ROUTES"), found)
    for route in routes:
        if route.policy not in raw_policies:  # a policy in error is reported as such, not as unknown
            found.append(Problem(Codes.ROUTE_UNKNOWN_POLICY, f"DJANGO_GCRA['ROUTES'] names unknown policy "
                                 f"{route.policy!r}.", "Add it to DJANGO_GCRA['POLICIES']."))
    surfaces = _surface_settings(read)
    timing = _timing_settings(read)
    fallback_processes = read.get("FALLBACK_PROCESSES")
    if not is_int(fallback_processes, 1):
        found.append(Problem(Codes.BAD_FALLBACK_PROCESSES, f"DJANGO_GCRA['FALLBACK_PROCESSES'] is "
                             f"{fallback_processes!r}; it must be an integer >= 1 (the number of processes "
                             "sharing a limit)."))
        fallback_processes = 1
    elif fallback_processes == 1:
        found += _local_fallback_problems(policies)
    log_interval = read.get("FALLBACK_LOG_INTERVAL")
    if not is_number(log_interval, 0, maximum=MAX_SECONDS):
        found.append(Problem(Codes.BAD_FALLBACK_LOG_INTERVAL, f"DJANGO_GCRA['FALLBACK_LOG_INTERVAL'] is "
                             f"{log_interval!r}; it must be a finite number of seconds >= 0."))
        log_interval = DEFAULTS["FALLBACK_LOG_INTERVAL"]
    max_keys = read.get("LEASE_MAX_KEYS")
    if not is_int(max_keys, 1):
        found.append(Problem(Codes.BAD_LEASE_MAX_KEYS, f"DJANGO_GCRA['LEASE_MAX_KEYS'] is {max_keys!r}.",
                             "Give the most leased keys a process keeps per policy: a positive int."))
        max_keys = DEFAULTS["LEASE_MAX_KEYS"]
    drf_algorithm = read.get("DRF_ALGORITHM")
    if drf_algorithm not in DRF_ALGORITHMS:
        found.append(Problem(Codes.BAD_CHOICE, f"DJANGO_GCRA['DRF_ALGORITHM'] is {drf_algorithm!r}; use one of "
                             f"{', '.join(DRF_ALGORITHMS)}."))
        drf_algorithm = DEFAULTS["DRF_ALGORITHM"]
    cache_alias = read.get("CACHE_ALIAS")
    regions = parse_regions(read.get("REGIONS"), getattr(django_settings, "CACHES", {}), found)
    found += budget_problems(policies, regions)
    if regions is not None:  # decisions run on the local region's Redis
        local_alias = regions.caches[regions.local]
        if "CACHE_ALIAS" not in raw:
            cache_alias = local_alias
        elif cache_alias != local_alias:
            found.append(Problem(Codes.REGION_CACHE_ALIAS, f"DJANGO_GCRA['CACHE_ALIAS'] is {cache_alias!r} but the "
                                 f"local region {regions.local!r} is served by {local_alias!r}.",
                                 "Leave CACHE_ALIAS unset with REGIONS (it is the local region's alias)."))
    found += _cache_problems(cache_alias)
    access = RuleSet()
    for kind in (EXEMPT, DENY):
        parse_rules(f"DJANGO_GCRA[{kind.upper()!r}]", read.get(kind.upper()), kind,
                    lambda d: is_known_descriptor(d, descriptors), found, access)
    built = Settings(
        enabled=enabled, cache_alias=str(cache_alias), prefix=prefix, descriptors=MappingProxyType(descriptors),
        access=access or None, ruled=bool(access) or any(p.access for p in policies.values()),
        policies=MappingProxyType(policies), routes=routes, default_tier=default_tier,
        fallback_processes=fallback_processes, fallback_log_interval=float(log_interval), lease_max_keys=max_keys,
        drf_algorithm=drf_algorithm,
        regions=regions, shedding=_shedding(read), otel=_otel(read.get("OTEL"), found), **surfaces, **timing)
    return built, tuple(found)


def _tier_problems(policies: Mapping[str, Policy], default_tier: str | None) -> list[Problem]:
    out = []
    for policy in policies.values():
        for limit in policy.limits:
            if limit.tiered and default_tier is not None and default_tier not in limit.rates:
                out.append(Problem(
                    Codes.BAD_DEFAULT_TIER, f"DEFAULT_TIER {default_tier!r} has no rate in policy {policy.name!r}, "
                    f"limit {limit.name!r} (tiers: {', '.join(map(str, limit.rates))}).",
                    "Give every tiered limit a rate for the default tier."))
    return out


def _surface_settings(read: _Reader) -> dict[str, Any]:
    found = read.found
    values: dict[str, Any] = {}
    values["headers"] = _header_styles(read.get("HEADERS"), found)
    denied_view = read.get("DENIED_VIEW")
    if denied_view is not None and (not isinstance(denied_view, str) or not denied_view):
        found.append(Problem(Codes.BAD_DENIED_VIEW, f"DJANGO_GCRA['DENIED_VIEW'] is {denied_view!r}.",
                             "Give a dotted path to a callable (request, decision) -> HttpResponse, or None."))
        denied_view = None
    values["denied_view"] = denied_view or None
    prefix = read.get("IPV6_PREFIX")
    if not is_int(prefix, 0, 128):
        found.append(Problem(Codes.BAD_IPV6_PREFIX, f"DJANGO_GCRA['IPV6_PREFIX'] is {prefix!r}; use an int from "
                             "0 to 128."))
        prefix = DEFAULTS["IPV6_PREFIX"]
    values["ipv6_prefix"] = prefix
    hops = read.get("TRUSTED_PROXIES")
    if not is_int(hops, 0, 64):
        found.append(Problem(Codes.BAD_TRUSTED_PROXIES, f"DJANGO_GCRA['TRUSTED_PROXIES'] is {hops!r}; use the "
                             "number of proxy hops in front of Django (0 for none)."))
        hops = 0
    values["trusted_proxies"] = hops
    return values


def otel_installed() -> bool:
    """True when OpenTelemetry's API (its metrics and trace modules) can be imported."""
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _otel(value: Any, found: list[Problem]) -> bool:
    """``OTEL``: a bool; True needs OpenTelemetry's API installed."""
    if not isinstance(value, bool):
        found.append(Problem(Codes.BAD_OTEL, f"DJANGO_GCRA['OTEL'] is {value!r}; it must be True or False."))
        return False
    if value and not otel_installed():
        found.append(Problem(Codes.OTEL_MISSING, "DJANGO_GCRA['OTEL'] is True but OpenTelemetry's API is not "
                             "installed.", "pip install opentelemetry-api (the [otel] extra), or set OTEL "
                             "to False."))
        return False
    return value


def _header_styles(headers: Any, found: list[Problem]) -> tuple[str, ...]:
    """``HEADERS``: one style, or a list of styles whose fields are all sent."""
    hint = f"Use one of {', '.join(HEADER_STYLES)}, or a list of them such as ['draft-11', 'github']."
    styles = (headers,) if isinstance(headers, str) else headers
    if not isinstance(styles, (list, tuple)) or not styles:
        found.append(Problem(Codes.BAD_HEADERS, f"DJANGO_GCRA['HEADERS'] is {headers!r}.", hint))
        return (DEFAULTS["HEADERS"],)
    bad = [s for s in styles if not isinstance(s, str) or s not in HEADER_STYLES]
    if bad:
        found.append(Problem(Codes.BAD_HEADERS, f"DJANGO_GCRA['HEADERS'] is {headers!r}: unknown style "
                             f"{bad[0]!r}.", hint))
        return (DEFAULTS["HEADERS"],)
    if len(set(styles)) != len(styles):
        found.append(Problem(Codes.BAD_HEADERS, f"DJANGO_GCRA['HEADERS'] {headers!r} names a style twice.",
                             "Name each style once."))
    elif "none" in styles and len(styles) > 1:
        found.append(Problem(Codes.BAD_HEADERS, f"DJANGO_GCRA['HEADERS'] {headers!r} names 'none' with other "
                             "styles.", "Give 'none' alone (no quota header), or only the styles to send."))
    else:
        return tuple(styles)
    return (DEFAULTS["HEADERS"],)


def _timing_settings(read: _Reader) -> dict[str, Any]:
    found = read.found
    refresh = read.seconds("OVERRIDE_REFRESH", Codes.BAD_OVERRIDE_TIMING)
    ttl = read.seconds("OVERRIDE_TTL", Codes.BAD_OVERRIDE_TIMING)
    if ttl < refresh:
        found.append(Problem(
            Codes.OVERRIDE_TTL_SHORT, f"DJANGO_GCRA['OVERRIDE_TTL'] ({ttl:g}) is shorter than OVERRIDE_REFRESH "
            f"({refresh:g}): every check of the version stamp reloads the overrides from the database.",
            "Keep OVERRIDE_TTL well above OVERRIDE_REFRESH (defaults: 30 and 1)."))
    timeouts: dict[str, float] = {}
    for name in ("TIMEOUT", "CONNECT_TIMEOUT"):
        value = read.get(name)
        if value is None and name == "CONNECT_TIMEOUT":
            value = timeouts.get("TIMEOUT", DEFAULTS["TIMEOUT"])
        elif not is_number(value, 0, strict=True, maximum=MAX_SECONDS * 1000):
            found.append(Problem(Codes.BAD_TIMEOUT, f"DJANGO_GCRA[{name!r}] is {value!r}; it must be a finite, "
                                 "positive number of milliseconds.", "The default is 10 (ms)."))
            value = DEFAULTS["TIMEOUT"]
        elif value > SLOW_TIMEOUT_MS:
            found.append(Problem(Codes.SLOW_TIMEOUT, f"DJANGO_GCRA[{name!r}] is {value} ms: while Redis is slow, "
                                 "every rate-limited request can wait that long.",
                                 f"Keep the limiter's timeouts at a few ms (at most {SLOW_TIMEOUT_MS})."))
        timeouts[name] = value
    return {"override_refresh": refresh, "override_ttl": ttl, "audit": _audit(read),
            "breaker": _breaker(read), "timeout": timeouts["TIMEOUT"] / 1000,
            "connect_timeout": timeouts["CONNECT_TIMEOUT"] / 1000}


def _audit(read: _Reader) -> AuditSettings:
    raw = read.raw.get("AUDIT", {})
    if not isinstance(raw, Mapping):
        read.found.append(Problem(Codes.BAD_AUDIT, "DJANGO_GCRA['AUDIT'] must be a dict."))
        return AuditSettings()
    for key in sorted(set(raw) - set(AUDIT_DEFAULTS), key=str):
        read.found.append(Problem(Codes.BAD_AUDIT, f"DJANGO_GCRA['AUDIT'] has an unknown key {key!r}.",
                                  f"Use {', '.join(AUDIT_DEFAULTS)}."))
    valid = {
        "ENABLED": (lambda v: isinstance(v, bool), "True or False"),
        "FLUSH_INTERVAL": (lambda v: is_number(v, MIN_FLUSH_INTERVAL, maximum=MAX_SECONDS),
                           f"a finite number of seconds from {MIN_FLUSH_INTERVAL} to {MAX_SECONDS:g}"),
        "MAX_BUFFER": (lambda v: is_int(v, 1), "an integer >= 1"),
        "RETENTION_DAYS": (lambda v: is_number(v, 0, maximum=100_000), "a finite number of days >= 0"),
    }
    values = dict(AUDIT_DEFAULTS)
    for key, (ok, expected) in valid.items():
        if key in raw:
            if ok(raw[key]):
                values[key] = raw[key]
            else:
                read.found.append(Problem(Codes.BAD_AUDIT, f"DJANGO_GCRA['AUDIT'][{key!r}] is {raw[key]!r}; it "
                                          f"must be {expected}."))
    return AuditSettings(values["ENABLED"], float(values["FLUSH_INTERVAL"]), values["MAX_BUFFER"],
                         values["RETENTION_DAYS"])


def _breaker(read: _Reader) -> BreakerSettings:
    raw = read.raw.get("BREAKER", BREAKER_DEFAULTS)
    failures = raw.get("failures", 5) if isinstance(raw, Mapping) else None
    cooldown = raw.get("cooldown", 1.0) if isinstance(raw, Mapping) else None
    if (not isinstance(raw, Mapping) or set(raw) - set(BREAKER_DEFAULTS) or not is_int(failures, 1)
            or not is_number(cooldown, 0, strict=True, maximum=MAX_SECONDS)):
        read.found.append(Problem(Codes.BAD_BREAKER, f"DJANGO_GCRA['BREAKER'] is {raw!r}; it must be "
                                  "{'failures': int >= 1, 'cooldown': finite seconds > 0}."))
        return BreakerSettings()
    return BreakerSettings(failures, float(cooldown))  # type: ignore[arg-type]


def _shedding(read: _Reader) -> SheddingSettings:
    raw = read.raw.get("SHEDDING", SHEDDING_DEFAULTS)
    found = read.found
    if not isinstance(raw, Mapping):
        found.append(Problem(Codes.SHED_NOT_A_DICT, f"DJANGO_GCRA['SHEDDING'] is {raw!r}; it must be a dict."))
        return SheddingSettings()
    for key in sorted(set(raw) - set(SHEDDING_DEFAULTS), key=str):
        found.append(Problem(Codes.SHED_UNKNOWN_KEY, f"DJANGO_GCRA['SHEDDING'] has an unknown key {key!r}.",
                             f"Use {', '.join(SHEDDING_DEFAULTS)}."))
    values = {**SHEDDING_DEFAULTS, **{k: v for k, v in raw.items() if k in SHEDDING_DEFAULTS}}

    def bad(key: str, code: str, expected: str) -> None:
        found.append(Problem(code, f"DJANGO_GCRA['SHEDDING'][{key!r}] is {values[key]!r}; it must be {expected}."))
        values[key] = SHEDDING_DEFAULTS[key]

    if not is_int(values["max_in_flight"], 1, 1_000_000):
        bad("max_in_flight", Codes.BAD_MAX_IN_FLIGHT, "an integer from 1 to 1000000")
    if "min_in_flight" not in raw:  # the default floor, under a smaller cap
        values["min_in_flight"] = min(values["min_in_flight"], values["max_in_flight"])
    elif not is_int(values["min_in_flight"], 1, values["max_in_flight"]):
        bad("min_in_flight", Codes.BAD_MIN_IN_FLIGHT, f"an integer from 1 to max_in_flight ({values['max_in_flight']})")
        values["min_in_flight"] = min(values["min_in_flight"], values["max_in_flight"])
    if not isinstance(values["adaptive"], bool):
        bad("adaptive", Codes.BAD_ADAPTIVE, "True or False")
    exempt = _exempt(values["exempt"])
    if exempt is None:
        bad("exempt", Codes.BAD_EXEMPT, "a list of regular expressions (strings)")
        exempt = ()
    if not is_int(values["retry_after"], 1, MAX_RETRY_AFTER):
        bad("retry_after", Codes.BAD_SHED_RETRY_AFTER, f"an integer number of seconds from 1 to {MAX_RETRY_AFTER}")
    for key in ("sample_interval", "min_rtt_interval"):
        if not is_number(values[key], 0.001, maximum=MAX_SECONDS):
            bad(key, Codes.BAD_SHED_INTERVAL, f"a finite number of seconds from 0.001 to {MAX_SECONDS:g}")
    if not is_int(values["min_rtt_samples"], 1, 100_000):
        bad("min_rtt_samples", Codes.BAD_MIN_RTT_SAMPLES, "an integer from 1 to 100000")
    for key, top in (("buffer", 10.0), ("jitter", 1.0)):
        if not is_number(values[key], 0, maximum=top):
            bad(key, Codes.BAD_SHED_FRACTION, f"a finite fraction from 0 to {top:g}")
    return SheddingSettings(
        max_in_flight=values["max_in_flight"], adaptive=values["adaptive"], min_in_flight=values["min_in_flight"],
        exempt=exempt, retry_after=values["retry_after"], sample_interval=float(values["sample_interval"]),
        min_rtt_interval=float(values["min_rtt_interval"]), min_rtt_samples=values["min_rtt_samples"],
        buffer=float(values["buffer"]), jitter=float(values["jitter"]))


def _exempt(value: Any) -> tuple[re.Pattern[str], ...] | None:
    """The compiled exempt regexes, or None when ``value`` is not a list of valid ones."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        return None
    try:
        return tuple(re.compile(item) for item in value)
    except re.error:
        return None


def _local_fallback_problems(policies: Mapping[str, Policy]) -> list[Problem]:
    return [Problem(
        Codes.LOCAL_FULL_RATE, f"Policy {policy.name!r} limit {limit.name!r} fails over to a local limit at its "
        "full rate: while Redis is down every process admits the whole limit.",
        "Set DJANGO_GCRA['FALLBACK_PROCESSES'] to the number of processes, or give the limit a 'fallback_rate'.")
        for policy in policies.values() if policy.on_failure == "local"
        for limit in policy.limits if limit.fallback_rate is None]


def _cache_problems(alias: Any) -> list[Problem]:
    caches = getattr(django_settings, "CACHES", {})
    if not isinstance(alias, str) or alias not in caches:
        return [Problem(Codes.CACHE_MISSING, f"DJANGO_GCRA['CACHE_ALIAS'] is {alias!r}, which is not in CACHES.",
                        "Name a django-redis cache alias.")]
    config = caches[alias]
    backend = config.get("BACKEND", "")
    from django.utils.module_loading import import_string
    from django_redis.cache import RedisCache

    try:
        ok = isinstance(backend, str) and issubclass(import_string(backend), RedisCache)
    except ImportError:
        ok = False
    if not ok:
        return [Problem(Codes.CACHE_NOT_REDIS, f"CACHES[{alias!r}] uses {backend!r}, not django-redis.",
                        "Set its BACKEND to 'django_redis.cache.RedisCache'.")]
    from .backends.cluster import is_cluster_client, startup_nodes

    if is_cluster_client(config.get("OPTIONS", {}).get("CLIENT_CLASS")):
        try:
            startup_nodes(config.get("LOCATION", ""))
        except ValueError as exc:
            return [Problem(Codes.BAD_CLUSTER_NODES, f"{exc} (CACHES[{alias!r}]['LOCATION'])",
                            "List the cluster's startup nodes as redis://host:port URLs.")]
    return []


_current: tuple[Settings, tuple[Problem, ...]] | None = None
_listeners: list[Callable[[], None]] = []


def _load() -> tuple[Settings, tuple[Problem, ...]]:
    global _current
    current = _current
    if current is None:
        current = _current = _build()
    return current


def problems() -> tuple[Problem, ...]:
    """Every problem of the current settings: what the system checks report."""
    return _load()[1]


def get_settings() -> Settings:
    """The current settings; ``ImproperlyConfigured`` if any of them is in error."""
    built, found = _current if _current is not None else _load()
    if found:
        error = next((p for p in found if p.is_error), None)
        if error is not None:
            raise ImproperlyConfigured(f"{error.msg} ({error.id}; run 'manage.py check' for all problems)")
    return built


def on_change(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` (no arguments) whenever the settings are rebuilt; returns it."""
    _listeners.append(callback)
    return callback


def forget_built() -> None:
    """Call every ``on_change`` callback with the settings unchanged: this process forgets
    what it built from them (clients, backends, leases, plans, caches). For
    ``django_gcra.testing.reset_limits``, through ``reset.forget_process_state``."""
    for callback in list(_listeners):
        callback()


def _reload(*, setting: str, **kwargs: Any) -> None:
    global _current
    if setting in ("DJANGO_GCRA", "CACHES"):
        _current = None
        for callback in _listeners:
            callback()


setting_changed.connect(_reload, dispatch_uid="django_gcra.conf")
