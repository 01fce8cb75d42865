"""Descriptors: client IP behind proxies, IPv6 grouping, user, method, route, headers, custom."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.test import Client, RequestFactory

from django_gcra.identity import adescriptors_for, client_ip, descriptor_names, descriptors_for, normalise_ip, url_name
from django_gcra.limiter import get_policy
from tests.support.surfaces_helpers import configure

factory = RequestFactory()


def ip_of(remote="192.0.2.10", xff=None):
    extra = {"REMOTE_ADDR": remote}
    if xff is not None:
        extra["HTTP_X_FORWARDED_FOR"] = xff
    return client_ip(factory.get("/", **extra))


def test_remote_addr_by_default_and_forwarded_for_ignored(gcra_settings):
    gcra_settings()
    assert ip_of(xff="203.0.113.7") == "192.0.2.10"


@pytest.mark.parametrize("hops, xff, expected", [
    (1, "203.0.113.7", "203.0.113.7"),
    (1, "6.6.6.6, 203.0.113.7", "203.0.113.7"),  # a client-supplied entry on the left is ignored
    (2, "6.6.6.6, 203.0.113.7, 10.0.0.2", "203.0.113.7"),  # the n-th from the right
    (2, "203.0.113.7", "192.0.2.10"),  # fewer entries than hops: REMOTE_ADDR
    (1, "", "192.0.2.10"),
    (1, "203.0.113.7:4711", "203.0.113.7"),
    (1, "[2001:db8::1]:443", "2001:db8::/64"),
    (1, " 6.6.6.6 ,, 203.0.113.7 ", "203.0.113.7"),
])
def test_trusted_proxies(gcra_settings, hops, xff, expected):
    gcra_settings(TRUSTED_PROXIES=hops)
    assert ip_of(xff=xff) == expected


def test_ipv6_grouping_and_ipv4_mapped(gcra_settings):
    gcra_settings()
    assert normalise_ip("2001:db8:1:2::1") == normalise_ip("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert normalise_ip("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert normalise_ip("::ffff:192.0.2.1") == "192.0.2.1"
    assert normalise_ip("fe80::1%eth0") == "fe80::/64"
    assert normalise_ip("not an address") == "not an address"  # still a key: garbage cannot dodge a limit
    assert normalise_ip("") is None
    gcra_settings(IPV6_PREFIX=48)
    assert normalise_ip("2001:db8:1:3::1") == normalise_ip("2001:db8:1:2::1") == "2001:db8:1::/48"


def test_user_method_header_and_custom(gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of"})
    request = factory.post("/", HTTP_X_API_KEY="k1", HTTP_X_TENANT="acme")
    request.user = AnonymousUser()
    names = ["user", "method", "header:X-Api-Key", "header:X-Missing", "tenant"]
    assert descriptors_for(request, names) == {"user": None, "method": "POST", "header:X-Api-Key": "k1",
                                               "header:X-Missing": None, "tenant": "acme"}
    request.user = User(pk=42)
    assert descriptors_for(request, ["user"]) == {"user": "42"}
    del request.user
    assert descriptors_for(request, ["user"]) == {"user": None}  # no auth middleware: missing


async def test_async_custom_descriptor_is_awaited(gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": "tests.support.descriptors.async_tenant_of"})
    request = factory.get("/", HTTP_X_TENANT="acme")
    request.user = AnonymousUser()
    assert await adescriptors_for(request, ["tenant", "user", "ip"]) == {"tenant": "acme", "user": None,
                                                                         "ip": "127.0.0.1"}


@pytest.mark.urls("tests.surfaces_urls")
def test_route_is_the_resolved_url_name():
    assert url_name(factory.get("/inline/")) == "inline"
    assert url_name(factory.get("/unnamed/")) is None
    assert url_name(factory.get("/nowhere/")) is None


def test_tier_is_asked_for_only_by_tiered_policies(gcra_settings):
    configure(gcra_settings, POLICIES={
        "tiered": {"limits": [{"name": "t", "key": ["tenant"], "rate": {"free": "1/m", "paid": "5/m"}}]},
        "flat": {"limits": [{"name": "t", "key": ["tenant"], "rate": "1/m"}]}})
    assert descriptor_names(get_policy("tiered")) == {"tenant", "tier"}
    assert descriptor_names(get_policy("flat")) == {"tenant"}


@pytest.mark.redis
@pytest.mark.urls("tests.surfaces_urls")
class TestThroughTheClient:
    """/inline/ allows a burst of 2 per client IP."""

    @pytest.fixture(autouse=True)
    def redis(self, real_redis, gcra_settings):
        self.configure = lambda **extra: configure(gcra_settings, **extra)
        self.configure()

    @staticmethod
    def statuses(*requests):
        return [Client().get("/inline/", **extra).status_code for extra in requests]

    def test_spoofed_forwarded_for_without_trusted_proxies_shares_one_limit(self):
        spoofs = [{"HTTP_X_FORWARDED_FOR": f"198.51.100.{i}"} for i in range(3)]
        assert self.statuses(*spoofs) == [200, 200, 429]

    def test_spoofing_the_left_of_forwarded_for_behind_a_trusted_proxy(self):
        self.configure(TRUSTED_PROXIES=1)
        spoofs = [{"HTTP_X_FORWARDED_FOR": f"198.51.100.{i}, 203.0.113.7"} for i in range(3)]
        assert self.statuses(*spoofs) == [200, 200, 429]
        assert self.statuses({"HTTP_X_FORWARDED_FOR": "203.0.113.8"}) == [200]  # another client

    def test_ipv6_clients_are_grouped_by_prefix(self):
        same_64 = [{"REMOTE_ADDR": f"2001:db8:1:2::{i}"} for i in range(1, 4)]
        assert self.statuses(*same_64) == [200, 200, 429]
        assert self.statuses({"REMOTE_ADDR": "2001:db8:1:3::1"}) == [200]

    def test_ipv4_mapped_is_the_ipv4_client(self):
        assert self.statuses({"REMOTE_ADDR": "192.0.2.1"}, {"REMOTE_ADDR": "::ffff:192.0.2.1"},
                             {"REMOTE_ADDR": "192.0.2.1"}) == [200, 200, 429]
