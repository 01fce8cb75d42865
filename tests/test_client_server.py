"""django_gcra.client against a real server: gunicorn on loopback serving django_gcra-limited
views (tests/client_site) on a real redis-server. The server stamps each response with
its request's arrival time (X-Arrived-At) and counts requests per run in Redis, so what
is asserted is what the server saw."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import httpx
import pytest
import requests

from django_gcra.client import AsyncRetryingTransport, RetryBudgetExhausted, RetryingAdapter, RetryingTransport
from tests.support.http_servers import start_site

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(redis_server):
    site = start_site(redis_server.url)
    yield site
    site.stop()


@pytest.fixture
def counts(redis_server):
    client = redis_server.client()

    def read(run: str, what: str = "received") -> int:
        return int(client.get(f"site:{run}:{what}") or 0)

    yield read
    client.close()


def ids() -> tuple[str, str]:
    return uuid.uuid4().hex, uuid.uuid4().hex


def arrived(response) -> float:
    return float(response.headers["X-Arrived-At"])


def requests_get(url: str, headers: dict, **options):
    session = requests.Session()
    session.mount("http://", RetryingAdapter(**options))
    with session:
        return session.get(url, headers=headers, timeout=10)


def httpx_get(url: str, headers: dict, **options):
    with httpx.Client(transport=RetryingTransport(**options), timeout=10) as client:
        return client.get(url, headers=headers)


@pytest.mark.parametrize("get", [requests_get, httpx_get], ids=["requests", "httpx"])
def test_retries_wait_at_least_retry_after_and_the_jitter_is_real(site, counts, get):
    """Six clients, each limited to 1/s: the second request of each is refused with
    Retry-After: 1 and retried; the server sees every retry at least 1 s after the 429,
    and the six waits are spread by the jitter."""
    run = uuid.uuid4().hex
    gaps, retry_afters, errors = [], [], []

    def client() -> None:
        try:
            headers = {"X-Client": uuid.uuid4().hex, "X-Run": run}
            denied = []

            def on_retry(attempt, wait, response):
                denied.append(response)

            assert get(site.url + "/tight/", headers).status_code == 200
            final = get(site.url + "/tight/", headers, on_retry=on_retry, backoff_base=1.0)
            assert final.status_code == 200 and len(denied) == 1 and denied[0].status_code == 429
            retry_afters.append(int(denied[0].headers["Retry-After"]))
            gaps.append(arrived(final) - arrived(denied[0]))
        except Exception as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert retry_afters == [1] * 6
    assert all(gap >= 1.0 for gap in gaps), gaps
    assert len(set(gaps)) == 6 and max(gaps) - min(gaps) > 0.05, gaps  # jitter U(0, 1): spread
    assert counts(run) == 18 and counts(run, "admitted") == 12  # one 429 per client, retried once


def test_the_time_budget_stops_retries_without_waiting(site, counts):
    """Retry-After 60 s (a 1/m limit) does not fit max_wait=5: no wait, one attempt, the
    exception carries the server's 429."""
    client_id, run = ids()
    headers = {"X-Client": client_id, "X-Run": run}
    with httpx.Client(transport=RetryingTransport(max_wait=5), timeout=10) as client:
        assert client.get(site.url + "/minute/", headers=headers).status_code == 200
        started = time.monotonic()
        with pytest.raises(RetryBudgetExhausted) as info:
            client.get(site.url + "/minute/", headers=headers)
        elapsed = time.monotonic() - started
    exc = info.value
    assert exc.reason == "time" and exc.attempts == 1 and exc.waited == 0 and exc.retry_after >= 59
    assert exc.response.status_code == 429 and exc.response.json()["error"] == "too_many_requests"
    assert elapsed < 5 and counts(run) == 2


def test_the_attempts_budget_stops_retries(site, counts):
    """A request that can never be admitted (cost 2 > burst 1) is sent max_attempts times."""
    client_id, run = ids()
    session = requests.Session()
    session.mount("http://", RetryingAdapter(max_attempts=3, max_wait=20))
    with session, pytest.raises(RetryBudgetExhausted) as info:
        session.get(site.url + "/tight/?cost=2", headers={"X-Client": client_id, "X-Run": run}, timeout=10)
    assert info.value.reason == "attempts" and info.value.attempts == 3 and 0 < info.value.waited <= 20
    assert counts(run) == 3 and counts(run, "admitted") == 0


def test_raise_on_exhausted_false_returns_the_429(site, counts):
    client_id, run = ids()
    headers = {"X-Client": client_id, "X-Run": run}
    with httpx.Client(transport=RetryingTransport(max_wait=5, raise_on_exhausted=False), timeout=10) as client:
        client.get(site.url + "/minute/", headers=headers)
        response = client.get(site.url + "/minute/", headers=headers)
    assert response.status_code == 429 and int(response.headers["Retry-After"]) >= 59 and counts(run) == 2


@pytest.mark.parametrize("lib", ["requests", "httpx"])
def test_non_idempotent_requests_are_not_retried_by_default(site, counts, lib):
    client_id, run = ids()
    headers = {"X-Client": client_id, "X-Run": run}
    url = site.url + "/tight/"
    if lib == "requests":
        session = requests.Session()
        session.mount("http://", RetryingAdapter(max_attempts=5))
        with session:
            statuses = [session.post(url, data=b"x", headers=headers, timeout=10).status_code for _ in range(2)]
            statuses.append(session.patch(url, data=b"x", headers=headers, timeout=10).status_code)
    else:
        with httpx.Client(transport=RetryingTransport(max_attempts=5), timeout=10) as client:
            statuses = [client.post(url, content=b"x", headers=headers).status_code for _ in range(2)]
            statuses.append(client.patch(url, content=b"x", headers=headers).status_code)
    assert statuses == [200, 429, 429]
    assert counts(run) == 3 and counts(run, "POST") == 2 and counts(run, "PATCH") == 1


def test_retry_non_idempotent_replays_a_body_but_never_a_stream(site, counts):
    client_id, run = ids()
    headers = {"X-Client": client_id, "X-Run": run}
    url = site.url + "/tight/"
    with httpx.Client(transport=RetryingTransport(retry_non_idempotent=True), timeout=10) as client:
        assert client.post(url, content=b"first", headers=headers).status_code == 200
        replayed = client.post(url, content=b"again", headers=headers)  # 429, then the same body after 1 s
        assert replayed.status_code == 200 and replayed.json()["body"] == "again"
        streamed = client.post(url, content=iter([b"a", b"b"]), headers=headers)
    assert streamed.status_code == 429 and counts(run) == 4


def test_pacing_waits_instead_of_sending_into_a_429(site, counts):
    """RateLimit: "tight";r=0;t=1 on the first response holds the second for a second."""
    client_id, run = ids()
    headers = {"X-Client": client_id, "X-Run": run}
    paced = []
    transport = RetryingTransport(pace=True, backoff_base=0.2)
    transport.sleep = lambda s: (paced.append(s), time.sleep(s))
    with httpx.Client(transport=transport, timeout=10) as client:
        first = client.get(site.url + "/tight/", headers=headers)
        second = client.get(site.url + "/tight/", headers=headers)
    assert first.headers["RateLimit"] == '"tight";r=0;t=1'
    assert (first.status_code, second.status_code) == (200, 200) and len(paced) == 1 and 0.9 <= paced[0] <= 1.25
    assert counts(run) == 2 and arrived(second) - arrived(first) >= 0.9


def test_async_transport_under_a_real_event_loop(site, counts):
    """Twenty concurrent tasks on one event loop, each refused once: every retry reaches
    the server at least Retry-After after its 429, and the waits overlap (the loop is
    never blocked by a wait)."""
    run = uuid.uuid4().hex
    waits: list[float] = []

    async def one() -> float:
        headers = {"X-Client": uuid.uuid4().hex, "X-Run": run}
        denied = []

        def on_retry(attempt, wait, response):
            waits.append(wait)
            denied.append(response)

        transport = AsyncRetryingTransport(on_retry=on_retry, backoff_base=1.0)
        async with httpx.AsyncClient(transport=transport, timeout=20) as client:
            assert (await client.get(site.url + "/tight/", headers=headers)).status_code == 200
            final = await client.get(site.url + "/tight/", headers=headers)
        assert final.status_code == 200 and [r.status_code for r in denied] == [429]
        return arrived(final) - arrived(denied[0])

    async def main() -> tuple[list[float], float]:
        started = time.monotonic()
        gaps = await asyncio.gather(*(one() for _ in range(20)))
        return gaps, time.monotonic() - started

    gaps, elapsed = asyncio.run(main())
    assert len(waits) == 20 and all(w >= 1.0 for w in waits) and len(set(waits)) == 20
    assert all(g >= 1.0 for g in gaps), gaps
    assert elapsed < sum(waits) / 4  # concurrent: the waits overlap
    assert counts(run) == 60 and counts(run, "admitted") == 40
