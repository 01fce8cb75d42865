"""The contenders of ``bench_peers``: one small factory each, behind one tiny interface.

A contender answers ``decide(tenant, user) -> allowed`` for a single limit on ``user``
or, when built with ``two=True``, for a tenant limit plus a user limit. Each peer is
called through its own programmatic check (the call its decorator or throttle class
makes), with no HTTP response around it, so every contender pays the same framing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from benchmarks.bench_core import BARE_SCRIPT

# Algorithm families, which decide what each contender promises (see ``promise``).
GCRA, FIXED, LOG, COUNTER = "GCRA", "fixed window", "sliding log", "sliding window counter"


@dataclass(frozen=True)
class Rate:
    """``count`` decisions per second, and a burst for the GCRA contenders."""

    count: int
    burst: int

    @property
    def text(self) -> str:
        return f"{self.count}/s"


# Throughput: limits no contender reaches here, so every decision takes the admit path.
LOOSE = Rate(100_000, 1_000)
# Over-admission: a limit 8 hammering processes exceed many times over.
STRICT = Rate(50, 10)
PRESETS = {"loose": LOOSE, "strict": STRICT}
# The sliding logs (ours and limits' moving window) hold one entry per admitted unit; the
# throughput runs cap them at 10,000 per second (django_gcra's most, check E018), still
# never reached, so both logs hold the same entries.
LOG_CAP = 10_000


@dataclass
class Contender:
    name: str
    algorithm: str
    decide: Callable[[str, str], bool]  # (tenant, user) -> allowed


def promise(algorithm: str, rate: Rate, first: float, last: float) -> float:
    """The most decisions the contender's own algorithm admits on one key in [first, last]."""
    elapsed = last - first
    if algorithm == GCRA:  # burst, then one per interval
        return rate.burst + elapsed * rate.count
    if algorithm == FIXED:  # count per clock-aligned 1 s window touched
        return rate.count * (int(last) - int(first) + 1)
    # A sliding log admits count in any 1 s; the sliding window counter's current window
    # alone never exceeds count, and its windows start at the first hit.
    return rate.count * (int(elapsed) + 1)


# ---------------------------------------------------------------- Django settings

def policies() -> dict:
    """django_gcra policies for each preset: one limit, tenant + user, and leased (names of one
    length, so key names weigh the same in the memory figures)."""
    out = {}
    for preset, rate in PRESETS.items():
        user = {"name": "user", "key": ["user"], "rate": rate.text, "burst": rate.burst}
        out[f"plain-{preset}"] = {"limits": [user]}
        out[f"multi-{preset}"] = {"limits": [
            {"name": "tenant", "key": ["tenant"], "rate": rate.text, "burst": rate.burst},
            {**user, "key": ["tenant", "user"]}]}
        # A lease must stay well below the burst (check E051): 10 on the loose preset, 4 on the strict one.
        out[f"lease-{preset}"] = {"limits": [user], "lease": {"size": min(10, rate.burst // 2), "ttl": 1.0}}
        # The sliding algorithms: N per second, no burst (the names of one length again); the
        # log at most LOG_CAP per second (check E018), as limits' moving window here.
        for algorithm, short in (("sliding_log", "slog"), ("sliding_window", "swin")):
            text = f"{min(rate.count, LOG_CAP)}/s" if algorithm == "sliding_log" else rate.text
            one = {"name": "user", "key": ["user"], "rate": text, "algorithm": algorithm}
            out[f"{short}-{preset}"] = {"limits": [one]}
            out[f"{short}multi-{preset}"] = {"limits": [
                {"name": "tenant", "key": ["tenant"], "rate": text, "algorithm": algorithm},
                {**one, "key": ["tenant", "user"]}]}
    return out


def setup_django(url: str, port: int) -> None:
    from tests.support.workers import setup_django

    setup_django(url, {"DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"}, "POLICIES": policies()},
                 apps=("rest_framework",),
                 RATELIMIT_USE_CACHE="default",  # django-ratelimit: the django-redis cache
                 RATELIMIT_BACKEND="redis",  # django-smart-ratelimit: its own Redis backend, same server
                 RATELIMIT_REDIS={"host": "127.0.0.1", "port": port, "db": 0})


class _User:
    is_authenticated = True

    def __init__(self, pk: str) -> None:
        self.pk = self.id = pk


class Request:
    """The attributes the peers read from a request: method, META, user; plus the tenant."""

    method = "GET"
    META: ClassVar[dict[str, str]] = {"REMOTE_ADDR": "127.0.0.1"}

    def __init__(self, tenant: str, user: str) -> None:
        self.tenant, self.user = tenant, _User(user)


# ---------------------------------------------------------------- the contenders

def django_gcra(url: str, rate: Rate, preset: str, two: bool) -> Contender:
    from django_gcra import decide

    if two:
        policy = f"multi-{preset}"
        return Contender("django_gcra composite", GCRA, lambda t, u: decide(policy, {"tenant": t, "user": u}).allowed)
    policy = f"plain-{preset}"
    return Contender("django_gcra", GCRA, lambda t, u: decide(policy, {"user": u}).allowed)


def django_gcra_leased(url: str, rate: Rate, preset: str, two: bool) -> Contender | None:
    from django_gcra import decide

    if two:
        return None  # leasing a composite policy is a configuration error, by design
    policy = f"lease-{preset}"
    return Contender("django_gcra leased", GCRA, lambda t, u: decide(policy, {"user": u}).allowed)


def _django_gcra_sliding(short: str, label: str, algorithm: str):
    def factory(url: str, rate: Rate, preset: str, two: bool) -> Contender:
        from django_gcra import decide

        if two:
            policy = f"{short}multi-{preset}"
            return Contender(f"{label} composite", algorithm,
                             lambda t, u: decide(policy, {"tenant": t, "user": u}).allowed)
        policy = f"{short}-{preset}"
        return Contender(label, algorithm, lambda t, u: decide(policy, {"user": u}).allowed)

    return factory


def drf(url: str, rate: Rate, preset: str, two: bool) -> Contender:
    from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle

    class User(UserRateThrottle):
        pass

    class Tenant(SimpleRateThrottle):
        scope = "tenant"

        def get_cache_key(self, request, view):
            return self.cache_format % {"scope": self.scope, "ident": request.tenant}

    User.rate = Tenant.rate = rate.text  # as DEFAULT_THROTTLE_RATES would set them
    classes = (Tenant, User) if two else (User,)

    def decide(t: str, u: str) -> bool:
        request = Request(t, u)
        # APIView.check_throttles: a fresh instance of each class, every one consulted.
        return all([cls().allow_request(request, None) for cls in classes])  # noqa: C419 (no short cut)

    return Contender("DRF UserRateThrottle", LOG, decide)


def django_ratelimit(url: str, rate: Rate, preset: str, two: bool) -> Contender:
    from django_ratelimit.core import is_ratelimited

    def user_key(group, request):
        return request.user.pk

    def tenant_key(group, request):
        return request.tenant

    checks = [("tenant", tenant_key)] if two else []
    checks.append(("user", user_key))

    def decide(t: str, u: str) -> bool:
        request = Request(t, u)  # stacked @ratelimit decorators: the first denial stops
        return not any(is_ratelimited(request, group=g, key=k, rate=rate.text, increment=True) for g, k in checks)

    return Contender("django-ratelimit", FIXED, decide)


def smart_ratelimit(url: str, rate: Rate, preset: str, two: bool) -> Contender:
    from django_smart_ratelimit import is_ratelimited

    keys = [("tenant", lambda r: f"t:{r.tenant}")] if two else []
    keys.append(("user", lambda r: f"u:{r.user.pk}"))

    def decide(t: str, u: str) -> bool:
        request = Request(t, u)
        return not any(is_ratelimited(request, group=g, key=k, rate=rate.text) for g, k in keys)

    return Contender("django-smart-ratelimit", LOG, decide)  # its default: sliding window (a ZSET log)


def _limits(strategy_name: str, label: str, algorithm: str, cap: int | None = None):
    def factory(url: str, rate: Rate, preset: str, two: bool) -> Contender:
        import limits
        import limits.storage
        import limits.strategies

        strategy = getattr(limits.strategies, strategy_name)(limits.storage.RedisStorage(url))
        item = limits.RateLimitItemPerSecond(rate.count if cap is None else min(rate.count, cap))
        scopes = ("tenant", "user") if two else ("user",)

        def decide(t: str, u: str) -> bool:
            ids = {"tenant": t, "user": u}
            return all(strategy.hit(item, scope, ids[scope]) for scope in scopes)

        return Contender(label, algorithm, decide)

    return factory


def throttled_gcra(url: str, rate: Rate, preset: str, two: bool) -> Contender:
    from throttled import RateLimiterType, RedisStore, Throttled, per_sec

    store = RedisStore(server=url)
    throttles = [Throttled(using=RateLimiterType.GCRA.value, quota=per_sec(rate.count, burst=rate.burst), store=store)
                 for _ in range(2 if two else 1)]

    def decide(t: str, u: str) -> bool:
        keys = (f"t:{t}", f"u:{u}") if two else (f"u:{u}",)
        return all(not th.limit(k).limited for th, k in zip(throttles, keys))

    return Contender("throttled-py GCRA", GCRA, decide)


def bare_script(url: str, rate: Rate, preset: str, two: bool) -> Contender:
    import redis

    script = redis.Redis.from_url(url).register_script(BARE_SCRIPT)
    interval = 1_000_000 // rate.count

    def one(key: str) -> bool:
        return script(keys=[key], args=[interval, rate.burst, 1])[0] == 1

    if two:  # the floor of checking each limit with its own call
        return Contender("bare script x2 (floor)", GCRA, lambda t, u: one(f"bare:{{{t}}}") and one(f"bare:{{{t}}}:{u}"))
    return Contender("bare script (floor)", GCRA, lambda t, u: one(f"bare:{{{u}}}"))


# The sliding contenders and the peer running the same algorithm (the comparison bench_peers reports).
SLIDING_PAIRS = {"django_gcra_log": "limits_moving", "django_gcra_window": "limits_sliding"}

FACTORIES: dict[str, Callable[..., Contender | None]] = {
    "django_gcra": django_gcra,
    "django_gcra_leased": django_gcra_leased,
    "django_gcra_log": _django_gcra_sliding("slog", "django_gcra sliding_log", LOG),
    "django_gcra_window": _django_gcra_sliding("swin", "django_gcra sliding_window", COUNTER),
    "drf": drf,
    "django_ratelimit": django_ratelimit,
    "smart_ratelimit": smart_ratelimit,
    "limits_moving": _limits("MovingWindowRateLimiter", "limits moving window", LOG, cap=LOG_CAP),
    "limits_sliding": _limits("SlidingWindowCounterRateLimiter", "limits sliding counter", COUNTER),
    "throttled_gcra": throttled_gcra,
    "bare": bare_script,
}


def build(key: str, url: str, preset: str = "loose", two: bool = False) -> Contender | None:
    """The contender ``key`` of ``FACTORIES`` for a preset's rate; None if it cannot express ``two``."""
    return FACTORIES[key](url, PRESETS[preset], preset, two)
