"""OpenTelemetry (``"OTEL": True``): the Prometheus counters through the SDK's in-memory
reader, the decision's attributes on the current span through its in-memory exporter,
nothing registered when off, and the system checks E140/E141."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import checks
from django.test import Client
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_gcra import decide, otel
from django_gcra.signals import notable_observers, observers
from tests.support.servers import free_port

pytestmark = [pytest.mark.redis]

POLICIES = {
    "o_api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 1}]},
    "o_trial": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 1}], "mode": "shadow"},
    "o_open": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m"}], "on_failure": "open"},
    "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 1}]},
}
GCRA = {"POLICIES": POLICIES, "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"}}


@pytest.fixture(scope="module")
def sdk():
    """The SDK's providers, set once for the process (OpenTelemetry allows one global provider)."""
    reader, exporter = InMemoryMetricReader(), InMemorySpanExporter()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    return reader, exporter


@pytest.fixture
def on(sdk, real_redis, gcra_settings, monkeypatch):
    monkeypatch.setattr("django_gcra.audit.recorder.record", lambda *a, **k: None)  # keep the audit out of it
    gcra_settings(**GCRA, OTEL=True)
    sdk[1].clear()
    return sdk


def points(reader, name):
    """{attributes: value} of the metric ``name`` as the reader collects it now."""
    found = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found[tuple(sorted(point.attributes.items()))] = point.value
    return found


def value(reader, name, **attributes):
    return points(reader, name).get(tuple(sorted(attributes.items())), 0)


def test_decisions_are_counted_by_policy_limit_and_outcome(on):
    reader, _ = on
    name = "django_gcra_decisions_total"
    before = [value(reader, name, policy="o_api", limit="tenant", outcome=o) for o in ("allowed", "denied")]
    for _ in range(3):
        decide("o_api", {"tenant": "secret-tenant-4242"})
    after = [value(reader, name, policy="o_api", limit="tenant", outcome=o) for o in ("allowed", "denied")]
    assert [a - b for a, b in zip(after, before)] == [1, 2]
    shadow = value(reader, name, policy="o_trial", limit="tenant", outcome="shadow_denied")
    decide("o_trial", {"tenant": "t"}), decide("o_trial", {"tenant": "t"})
    assert value(reader, name, policy="o_trial", limit="tenant", outcome="shadow_denied") == shadow + 1
    every = points(reader, name)
    assert {key for attrs in every for key, _ in attrs} == {"policy", "limit", "outcome"}
    assert not any("secret-tenant-4242" in str(attrs) for attrs in every)  # never a key


def test_fallback_decisions_are_counted_apart(on, settings):
    reader, _ = on
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    name = "django_gcra_fallback_decisions_total"
    before = value(reader, name, policy="o_open", outcome="fallback_allowed")
    assert decide("o_open", {"tenant": "a"}).fallback
    assert value(reader, name, policy="o_open", outcome="fallback_allowed") == before + 1


@pytest.mark.urls("tests.surfaces_urls")
def test_the_decision_is_on_the_current_span(on):
    _, exporter = on
    tracer = trace.get_tracer("tests")
    client = Client(REMOTE_ADDR="10.1.2.3")
    for _ in range(2):
        with tracer.start_as_current_span("POST /login/"):
            client.post("/login/")
    allowed, denied = exporter.get_finished_spans()
    assert dict(allowed.attributes) == {"ratelimit.policy": "login", "ratelimit.limit": "ip",
                                        "ratelimit.allowed": True, "ratelimit.outcome": "allowed"}
    assert dict(denied.attributes) == {"ratelimit.policy": "login", "ratelimit.limit": "ip",
                                       "ratelimit.allowed": False, "ratelimit.outcome": "denied"}


def test_off_registers_no_observer_and_touches_no_span(sdk, real_redis, gcra_settings):
    gcra_settings(**GCRA)  # OTEL unset: False
    assert otel.on_decision not in observers and otel.on_notable not in notable_observers
    assert not otel.enabled()
    reader, exporter = sdk
    exporter.clear()
    with trace.get_tracer("tests").start_as_current_span("work"):
        decide("o_api", {"tenant": "quiet"})
    [span] = exporter.get_finished_spans()
    assert not span.attributes
    assert points(reader, "django_gcra_decisions_total") == {}  # collected while off: nothing observed
    gcra_settings(**GCRA, OTEL=True)
    assert otel.on_decision in observers and otel.on_notable in notable_observers
    gcra_settings(**GCRA, OTEL=False)
    assert otel.on_decision not in observers and otel.on_notable not in notable_observers


def ids(gcra_settings, **values):
    gcra_settings(**GCRA, **values)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"]) if m.id.startswith("django_gcra.E14")})


@pytest.mark.parametrize("bad", ["yes", 1, None, "True"])
def test_otel_must_be_a_bool(gcra_settings, bad):
    assert ids(gcra_settings, OTEL=bad) == ["django_gcra.E140"]
    assert otel.on_decision not in observers


def test_otel_without_opentelemetry_installed_is_an_error(gcra_settings, monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)  # as if not installed: import fails
    assert ids(gcra_settings, OTEL=True) == ["django_gcra.E141"]
    assert otel.on_decision not in observers
    assert ids(gcra_settings, OTEL=False) == []


def test_the_app_needs_neither_opentelemetry_nor_ninja():
    """Off by default: django_gcra imports neither optional package (they are blocked here)."""
    code = ("import sys; sys.modules['opentelemetry'] = sys.modules['ninja'] = None\n"
            "import django; django.setup()\n"
            "from django_gcra import decide, otel\n"
            "assert decide('login', {'ip': '1.2.3.4'}).allowed and not otel.enabled()\n"
            "try:\n    import django_gcra.ninja\nexcept ImportError:\n    print('ok')")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"})
    assert done.stdout.strip() == "ok", done.stderr


def test_every_check_of_the_range_is_documented():
    from django_gcra.codes import Codes

    used = {value for value in vars(Codes).values() if isinstance(value, str) and re.search(r"\.[EW]14\d$", value)}
    page = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "checks.md").read_text()
    assert used == set(re.findall(r"`(django_gcra\.[EW]14\d)`", page)) == {"django_gcra.E140", "django_gcra.E141"}
