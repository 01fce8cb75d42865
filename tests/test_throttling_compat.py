"""What a DRF throttle subclass overrides keeps working on the GCRA classes (real redis-server)."""

from __future__ import annotations

import re
import warnings

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle
from rest_framework.views import APIView

from django_gcra.throttling import (
    GCRAAnonRateThrottle,
    GCRARateThrottle,
    GCRAScopedRateThrottle,
    GCRAUserRateThrottle,
    ThrottleOverrideWarning,
    parse_drf_rate,
    scope_name,
)
from tests.support.surfaces_helpers import sf_list

pytestmark = [pytest.mark.redis]

factory = APIRequestFactory()


@pytest.fixture(autouse=True)
def drf(real_redis, gcra_settings, settings):
    gcra_settings()
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "2/m", "user": "3/m"}}
    return real_redis


def view_with(*throttles, **attrs):
    def get(self, request):
        return Response("ok")

    return type("View", (APIView,), {"throttle_classes": throttles, "get": get, **attrs}).as_view()


def statuses(view, n, **request):
    return [view(factory.get("/", **request)).status_code for _ in range(n)]


class ApiKeyThrottle(GCRARateThrottle):
    rate = "2/m"

    def get_cache_key(self, request, view):
        key = request.headers.get("X-Api-Key")
        return None if key is None else f"apikey-{key}"


def test_get_cache_key_is_the_bucket_and_none_is_not_throttled():
    view = view_with(ApiKeyThrottle)
    assert statuses(view, 3, HTTP_X_API_KEY="a") == [200, 200, 429]
    assert statuses(view, 3, HTTP_X_API_KEY="b") == [200, 200, 429]  # same IP, another key: its own bucket
    assert statuses(view, 5) == [200] * 5  # no key: DRF lets it through


def test_get_cache_key_must_be_overridden_as_in_drf():
    with pytest.raises(NotImplementedError):
        type("Bare", (GCRARateThrottle,), {"rate": "1/s"})().get_cache_key(None, None)
    assert issubclass(GCRAAnonRateThrottle, AnonRateThrottle) and issubclass(GCRARateThrottle, SimpleRateThrottle)


def test_cache_format_and_get_ident_are_honoured():
    class Everyone(GCRAAnonRateThrottle):
        cache_format = "throttle_%(scope)s_everyone"  # no ident: one bucket for all clients

    class ByClientHeader(GCRAAnonRateThrottle):
        def get_ident(self, request):
            return request.headers.get("X-Client")

    shared = view_with(Everyone)
    assert statuses(shared, 2, REMOTE_ADDR="10.0.0.1") == [200, 200]
    assert statuses(shared, 1, REMOTE_ADDR="10.0.0.2") == [429]
    by_header = view_with(ByClientHeader)
    assert statuses(by_header, 3, HTTP_X_CLIENT="x") == [200, 200, 429]
    assert statuses(by_header, 1, HTTP_X_CLIENT="y") == [200]


def test_throttle_rates_and_rate_on_the_class():
    class OwnRates(GCRAScopedRateThrottle):
        THROTTLE_RATES = {"reports": "1/m"}

    class Sustained(GCRAUserRateThrottle):
        rate = "1/m"  # scope "user" stays: it must not spend the default "user" bucket

    assert statuses(view_with(OwnRates, throttle_scope="reports"), 2) == [200, 429]
    assert statuses(view_with(Sustained), 2) == [200, 429]
    assert statuses(view_with(GCRAUserRateThrottle), 4) == [200, 200, 200, 429]  # "user": 3/m, untouched


def test_default_throttle_rates_are_read_live(settings):
    assert statuses(view_with(GCRAAnonRateThrottle), 3) == [200, 200, 429]
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "5/m"}}
    assert GCRAAnonRateThrottle().num_requests == 5


def test_parse_rate_num_requests_and_duration_overrides():
    class FixedParse(GCRAAnonRateThrottle):
        def parse_rate(self, rate):
            return (1, 3600)

    class Tuned(GCRAAnonRateThrottle):
        def __init__(self):
            super().__init__()
            self.num_requests, self.duration = 4, 60

    assert FixedParse().num_requests == 1
    view = view_with(FixedParse)
    assert statuses(view, 1) == [200]
    denied = view(factory.get("/"))
    assert denied.status_code == 429 and denied["Retry-After"] == "3600"  # 1 per hour, not anon's 2/m
    assert statuses(view_with(Tuned), 5, REMOTE_ADDR="10.0.0.5") == [200, 200, 200, 200, 429]


@pytest.mark.parametrize(("rate", "parsed"), [
    ("100/hr", (100, 3600)), ("5/mins", (5, 60)), ("5/secs", (5, 1)), ("1/day", (1, 86400)),
    ("3/s", (3, 1)), ("10/5m", (10, 300)), ("2/30s", (2, 30)), (None, (None, None)),
])
def test_drf_rate_spellings(rate, parsed):
    assert parse_drf_rate(rate) == parsed
    if rate is not None and rate[rate.index("/") + 1].isalpha():
        assert SimpleRateThrottle.parse_rate(None, rate) == parsed  # DRF reads it the same way


@pytest.mark.parametrize("rate", ["fast", "5", "x/m", "5/", "5/fortnight2", 5])
def test_bad_rates_are_improperly_configured(rate):
    with pytest.raises(ImproperlyConfigured, match="Invalid throttle rate"):
        parse_drf_rate(rate)


def test_drf_spelling_decides_with_drf_meaning(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "2/mins"}}
    responses = [view_with(GCRAAnonRateThrottle)(factory.get("/")) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[-1]["Retry-After"] == "30"  # 2 per minute: one every 30 s


def test_wait_before_any_decision_is_drfs_estimate():
    throttle = GCRAAnonRateThrottle()
    throttle.num_requests, throttle.duration, throttle.history = 1, 60, []
    assert throttle.wait() == 30.0  # DRF's: duration / (available + 1)
    throttle.now, throttle.history = throttle.timer(), [throttle.timer()] * 3
    assert throttle.wait() is None


def test_wait_after_a_denial_is_exact():
    throttle = GCRAAnonRateThrottle()
    view = APIView()
    assert throttle.allow_request(view.initialize_request(factory.get("/")), view)
    assert throttle.allow_request(view.initialize_request(factory.get("/")), view)
    assert not throttle.allow_request(view.initialize_request(factory.get("/")), view)
    assert throttle.wait() == throttle.decision.retry_after and 29 < throttle.wait() <= 30


def test_throttle_success_and_failure_hooks_are_called():
    calls = []

    class Hooked(GCRAAnonRateThrottle):
        def throttle_success(self):
            calls.append(("success", self.key))
            return super().throttle_success()

        def throttle_failure(self):
            calls.append(("failure", self.key))
            return super().throttle_failure()

    assert statuses(view_with(Hooked), 3) == [200, 200, 429]
    assert calls == [("success", "throttle_anon_127.0.0.1")] * 2 + [("failure", "throttle_anon_127.0.0.1")]


def test_missing_rate_raises_in_init_as_drf(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {}}
    with pytest.raises(ImproperlyConfigured, match="No default throttle rate set for 'anon' scope"):
        GCRAAnonRateThrottle()
    with pytest.raises(ImproperlyConfigured, match="must set either `.scope` or `.rate`"):
        type("Nameless", (GCRARateThrottle,), {})()
    GCRAScopedRateThrottle()  # its rate comes with the view, as in DRF


def test_zero_rate_refuses_every_request(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "0/m"}}
    response = view_with(GCRAAnonRateThrottle)(factory.get("/"))
    assert response.status_code == 429 and "Retry-After" not in response


def test_num_proxies_when_trusted_proxies_is_unset(settings, gcra_settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "1/m"}, "NUM_PROXIES": 1}
    view = view_with(GCRAAnonRateThrottle)
    behind_proxy = {"REMOTE_ADDR": "10.0.0.1"}
    assert statuses(view, 2, HTTP_X_FORWARDED_FOR="198.51.100.1", **behind_proxy) == [200, 429]
    assert statuses(view, 1, HTTP_X_FORWARDED_FOR="198.51.100.2", **behind_proxy) == [200]  # another client
    assert statuses(view, 1, HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.2", **behind_proxy) == [429]  # forged entry
    gcra_settings(TRUSTED_PROXIES=0)  # set: it wins over NUM_PROXIES (the proxy is the client)
    assert statuses(view, 2, HTTP_X_FORWARDED_FOR="198.51.100.3", **behind_proxy) == [200, 429]
    assert statuses(view, 1, HTTP_X_FORWARDED_FOR="198.51.100.4", **behind_proxy) == [429]


def test_without_num_proxies_a_forged_x_forwarded_for_does_not_dodge(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "1/m"}}
    view = view_with(GCRAAnonRateThrottle)
    assert statuses(view, 1, HTTP_X_FORWARDED_FOR="1.1.1.1") == [200]
    assert statuses(view, 1, HTTP_X_FORWARDED_FOR="2.2.2.2") == [429]  # DRF would key by the header


def test_ipv6_clients_are_grouped_by_network(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "1/m"}}
    view = view_with(GCRAAnonRateThrottle)
    assert statuses(view, 1, REMOTE_ADDR="2001:db8:1:2::1") == [200]
    assert statuses(view, 1, REMOTE_ADDR="2001:db8:1:2::ffff") == [429]  # same /64
    assert statuses(view, 1, REMOTE_ADDR="2001:db8:1:3::1") == [200]


SCOPES = ["api:v1", "my scope", "uploads/day", "café", "x" * 64, "plain", "api-v1", "API:V1"]


@pytest.mark.parametrize("scope", SCOPES)
def test_any_scope_drf_accepts(settings, scope):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {scope: "1/m"}}
    view = view_with(GCRAScopedRateThrottle, throttle_scope=scope)
    first = view(factory.get("/"))
    assert first.status_code == 200 and view(factory.get("/")).status_code == 429
    [(name, _)] = sf_list(first, "RateLimit")
    assert name == scope_name(scope) and re.fullmatch(r"[A-Za-z0-9_.-]{1,60}", name)


def test_scope_names_are_distinct_and_readable():
    tricky = [*SCOPES, "api_v1", "api.v1", "api--v1", "cafe", "caf\u00e9", "cafe\u0301", "api-v1-" + "0" * 12, "x" * 60,
              "x" * 61]
    names = [scope_name(s) for s in tricky]
    assert len(set(names)) == len(set(tricky))
    assert scope_name("plain") == "plain"
    assert scope_name("api:v1") == "api-v1-94b47a150a80"  # stable: a new name would reset every bucket
    assert scope_name("café").startswith("cafe-")
    assert scope_name("api-v1-" + "0" * 12) != "api-v1-" + "0" * 12  # looks hashed: hashed again


def test_scopes_that_map_alike_keep_apart(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"api:v1": "1/m", "api v1": "1/m"}}
    assert statuses(view_with(GCRAScopedRateThrottle, throttle_scope="api:v1"), 2) == [200, 429]
    assert statuses(view_with(GCRAScopedRateThrottle, throttle_scope="api v1"), 1) == [200]


def test_timer_and_cache_overrides_are_reported_at_class_creation():
    with pytest.warns(ThrottleOverrideWarning, match="overrides 'timer'"):
        class Frozen(GCRAUserRateThrottle):
            def timer(self):
                return 0

    with pytest.warns(ThrottleOverrideWarning, match="overrides 'cache'"):
        class OwnCache(GCRAUserRateThrottle):
            cache = None

    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Plain(GCRAUserRateThrottle):
            rate = "1/s"


class Burst(GCRAAnonRateThrottle):
    scope = "burst"
    rate = "1/s"


class Sustained(GCRAAnonRateThrottle):
    scope = "sustained"
    rate = "2/m"


def test_several_throttles_name_the_longest_wait_and_list_every_limit():
    view = view_with(Burst, Sustained)
    first = view(factory.get("/"))
    assert first.status_code == 200
    assert [name for name, _ in sf_list(first, "RateLimit")] == ["burst"]  # least remaining (0 against 1)
    assert dict(sf_list(first, "RateLimit-Policy")) == {"burst": {"q": 1, "w": 1}, "sustained": {"q": 2, "w": 60}}
    second = view(factory.get("/"))  # burst denies (about 1 s), sustained admits its last unit
    assert second.status_code == 429 and second["Retry-After"] == "1"
    assert [name for name, _ in sf_list(second, "RateLimit")] == ["burst"]
    third = view(factory.get("/"))  # both deny: sustained's wait (about 30 s) is the longest
    [(name, params)] = sf_list(third, "RateLimit")
    assert third.status_code == 429 and name == "sustained"
    assert params["t"] == int(third["Retry-After"]) and 29 <= params["t"] <= 30
    assert third["X-RateLimit-Limit"] == "2" and third["X-RateLimit-Remaining"] == "0"
    assert dict(sf_list(third, "RateLimit-Policy")).keys() == {"burst", "sustained"}


def test_a_shadow_throttle_beside_an_enforced_one_is_not_advertised(gcra_settings):
    from django_gcra.throttling import PolicyThrottle
    from tests.support.surfaces_helpers import configure

    configure(gcra_settings)  # "shadowed": ip 5/m, burst 1, mode shadow
    view = view_with(PolicyThrottle, GCRAAnonRateThrottle, ratelimit_policy="shadowed")
    responses = [view(factory.get("/")) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]  # anon: 2/m; the shadow limit never denies
    for response in responses:
        assert dict(sf_list(response, "RateLimit-Policy")).keys() == {"anon"}
        assert [name for name, _ in sf_list(response, "RateLimit")] == ["anon"]
    assert responses[0]["X-RateLimit-Remaining"] == "1"


def test_a_timer_set_after_the_class_is_made_is_reported_once(monkeypatch):
    class Mocked(GCRAAnonRateThrottle):
        pass

    monkeypatch.setattr(Mocked, "timer", lambda self: 0, raising=False)  # DRF's tests do this
    view = view_with(Mocked)
    with pytest.warns(ThrottleOverrideWarning, match="Mocked overrides 'timer'") as caught:
        assert statuses(view, 3) == [200, 200, 429]  # the mocked clock changes nothing
    assert len(caught) == 1


def test_one_script_call_per_throttle_decision(drf):
    view = view_with(Burst, Sustained)
    view(factory.get("/"))  # loads the script and the override stamp
    drf.config_resetstat()
    for _ in range(3):
        view(factory.get("/"))
    stats = drf.info("commandstats")
    scripts = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval", "fcall"))
    assert scripts == 6  # two throttles, three requests: every decision one call, denied ones included
