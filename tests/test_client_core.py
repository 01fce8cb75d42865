"""django_gcra.client's shared core: header parsing, the wait formula, budgets, pacing.

Pure: a fake clock, a fake random and a recording sleep; no network, no Django settings.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from email.utils import format_datetime

import http_sf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_gcra.client import Pacer, RetryBudgetExhausted, RetryPolicy, parse_http_date, parse_retry_after
from django_gcra.client.core import run_sync
from django_gcra.client.fields import parse_sf_list, ratelimit_items

NOW = 1_790_000_000.0  # a Unix time in 2026


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.slept.append(seconds)
        self.t += seconds

    slept: list[float]


@pytest.fixture
def clock():
    c = Clock()
    c.slept = []
    return c


class Resp:
    def __init__(self, status: int, **headers: str) -> None:
        self.status_code = status
        self.headers = {k.replace("_", "-").lower(): v for k, v in headers.items()}
        self.discarded = False


def policy(clock, rnd=0.5, **options) -> RetryPolicy:
    return RetryPolicy(clock=clock, wall_clock=lambda: NOW, random=lambda: rnd, **options)


def run(pol: RetryPolicy, responses: list[Resp], clock, method="GET", url="http://api.test/x", replayable=True):
    sent = []

    def send():
        sent.append(clock())
        return responses[len(sent) - 1]

    def discard(r):
        r.discarded = True

    return run_sync(pol.start(method, url, replayable), send, discard, clock.sleep), sent


# --- Retry-After --------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [("0", 0.0), ("7", 7.0), (" 120 ", 120.0), ("1.5", 1.5)])
def test_retry_after_delta_seconds(value, expected):
    assert parse_retry_after(value, NOW) == expected


@pytest.mark.parametrize("value", [None, "", "-3", "soon", "1e3", "Wed, 99 Foo 2026 07:28:00 GMT", "0x10"])
def test_retry_after_garbage_is_none(value):
    assert parse_retry_after(value, NOW) is None


def test_retry_after_imf_fixdate():
    when = datetime.fromtimestamp(NOW + 42, tz=timezone.utc)
    value = format_datetime(when, usegmt=True)  # "Sat, 16 Sep 2026 ... GMT"
    assert value.endswith("GMT")
    assert parse_retry_after(value, NOW) == pytest.approx(42, abs=1e-6)


def test_retry_after_obsolete_date_forms_and_past_dates():
    # RFC 9110 s5.6.7: recipients accept the RFC 850 and asctime forms too.
    assert parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT") == parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT")
    assert parse_http_date("Sun Nov  6 08:49:37 1994") == parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT")
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == 784111777
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", NOW) == 0.0  # in the past: no wait


def test_http_date_is_read_against_the_responses_date_header(clock):
    """A skewed local clock does not matter when the response says what time it is."""
    server_now = NOW - 3600  # the server's clock is an hour behind ours
    headers = {"date": format_datetime(datetime.fromtimestamp(server_now, tz=timezone.utc), usegmt=True),
               "retry-after": format_datetime(datetime.fromtimestamp(server_now + 5, tz=timezone.utc), usegmt=True)}
    state = policy(clock).start("GET", "http://api.test/")
    assert state.floor(headers) == pytest.approx(5)
    del headers["date"]  # without Date, our wall clock: the date is long past
    assert state.floor(headers) == 0.0


# --- RateLimit (draft-11) -----------------------------------------------------------

def test_ratelimit_field():
    assert ratelimit_items('"user";r=0;t=3') == [("user", 0, 3)]
    assert ratelimit_items('"tenant";r=10;t=1, "user";r=0;t=3') == [("tenant", 10, 1), ("user", 0, 3)]
    assert ratelimit_items('"a";r=0') == [("a", 0, None)]
    assert ratelimit_items('"a";t=3, "b";r=-1, "c";r=?1, "d";r=2;t=1.5;acme-x="y"') == [("d", 2, None)]
    assert ratelimit_items('"a";r=0;t=3,') == [] and ratelimit_items('"a" "b"') == [] and ratelimit_items(None) == []


printable = st.characters(min_codepoint=32, max_codepoint=126)
sf_items = st.tuples(
    st.one_of(st.text(printable, max_size=8), st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True).map(http_sf.Token)),
    st.dictionaries(st.from_regex(r"[a-z][a-z0-9\-]{0,4}", fullmatch=True),
                    st.one_of(st.integers(0, 10**6), st.booleans(), st.text(printable, max_size=5)), max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.lists(sf_items, min_size=1, max_size=4))
def test_sf_list_parser_agrees_with_http_sf(items):
    text = http_sf.ser(items)
    ours = parse_sf_list(text)
    theirs = http_sf.parse(text.encode(), tltype="list")
    assert [(str(i), p) for i, p in ours] == [(str(i), p) for i, p in theirs]


# --- the wait formula and the budget -----------------------------------------------

def test_wait_is_retry_after_plus_full_jitter(clock):
    got, sent = run(policy(clock, rnd=0.5, backoff_base=0.4), [Resp(429, retry_after="2"), Resp(200)], clock)
    assert got.status_code == 200 and clock.slept == [pytest.approx(2 + 0.5 * 0.4)]
    assert sent[1] - sent[0] >= 2


@pytest.mark.parametrize("rnd", [0.0, 0.999999])
def test_jitter_bounds(clock, rnd):
    responses = [Resp(503, retry_after="1"), Resp(503, retry_after="1"), Resp(503, retry_after="1"), Resp(200)]
    run(policy(clock, rnd=rnd, max_attempts=4, backoff_base=0.5, backoff_cap=0.8), responses, clock)
    caps = [0.5, 0.8, 0.8]  # 0.5 * 2**n, capped at backoff_cap
    assert clock.slept == [pytest.approx(1 + rnd * cap) for cap in caps]


def test_no_retry_after_is_full_jitter_exponential_backoff(clock):
    responses = [Resp(503)] * 4 + [Resp(200)]
    run(policy(clock, rnd=0.75, max_attempts=5, backoff_base=1, backoff_cap=100), responses, clock)
    assert clock.slept == [pytest.approx(0.75 * 2 ** n) for n in range(4)]


def test_ratelimit_t_is_the_floor_without_retry_after(clock):
    run(policy(clock, rnd=0.0), [Resp(429, ratelimit='"user";r=0;t=4'), Resp(200)], clock)
    assert clock.slept == [4.0]
    clock.slept.clear()
    run(policy(clock, rnd=0.0), [Resp(429, retry_after="1", ratelimit='"user";r=0;t=4'), Resp(200)], clock)
    assert clock.slept == [1.0]  # Retry-After takes precedence


def test_attempts_budget_raises_with_the_last_response(clock):
    responses = [Resp(429, retry_after="1") for _ in range(3)]
    with pytest.raises(RetryBudgetExhausted) as info:
        run(policy(clock, max_attempts=3), responses, clock)
    exc = info.value
    assert exc.response is responses[2] and exc.attempts == 3 and exc.reason == "attempts"
    assert exc.waited == pytest.approx(sum(clock.slept)) and len(clock.slept) == 2 and exc.retry_after == 1.0
    assert all(r.discarded for r in responses)  # the last one too: its body is read for the exception
    assert "429 after 3 attempt(s)" in str(exc)


def test_time_budget_never_sleeps_past_max_wait(clock):
    responses = [Resp(429, retry_after="3") for _ in range(10)]
    with pytest.raises(RetryBudgetExhausted) as info:
        run(policy(clock, rnd=0.999, max_attempts=10, max_wait=10, backoff_base=4, backoff_cap=4), responses, clock)
    assert info.value.reason == "time" and sum(clock.slept) <= 10
    # 3 + 0.999 * 4, then 3 + jitter truncated to what is left (0.004 s), then nothing left: stop.
    assert clock.slept == [pytest.approx(3 + 0.999 * 4), pytest.approx(3 + 0.999 * (10 - 3 - 0.999 * 4 - 3))]


def test_retry_after_beyond_the_budget_is_not_waited(clock):
    with pytest.raises(RetryBudgetExhausted) as info:
        run(policy(clock, max_wait=30), [Resp(429, retry_after="31")], clock)
    assert info.value.reason == "time" and clock.slept == [] and info.value.attempts == 1
    with pytest.raises(RetryBudgetExhausted):  # max_delay caps one wait
        run(policy(clock, max_wait=30, max_delay=5), [Resp(429, retry_after="6")], clock)
    assert clock.slept == []


def test_raise_on_exhausted_false_returns_the_last_response(clock):
    responses = [Resp(429, retry_after="1"), Resp(429, retry_after="1")]
    got, sent = run(policy(clock, max_attempts=2, raise_on_exhausted=False), responses, clock)
    assert got is responses[1] and not got.discarded and len(sent) == 2


@pytest.mark.parametrize("method", ["POST", "PATCH", "CONNECT"])
def test_non_idempotent_methods_are_not_retried_by_default(clock, method):
    got, sent = run(policy(clock), [Resp(429, retry_after="1"), Resp(200)], clock, method=method)
    assert got.status_code == 429 and len(sent) == 1 and clock.slept == []


def test_retry_methods_and_retry_non_idempotent(clock):
    got, _ = run(policy(clock, retry_methods=["post"]), [Resp(429, retry_after="1"), Resp(200)], clock, method="POST")
    assert got.status_code == 200
    got, _ = run(policy(clock, retry_methods=["post"]), [Resp(429, retry_after="1"), Resp(200)], clock, method="GET")
    assert got.status_code == 429
    got, _ = run(policy(clock, retry_non_idempotent=True), [Resp(503), Resp(200)], clock, method="PATCH")
    assert got.status_code == 200
    with pytest.raises(ValueError):
        RetryPolicy(retry_methods=["POST"], retry_non_idempotent=True)


def test_a_body_that_cannot_be_replayed_is_never_resent(clock):
    got, sent = run(policy(clock, retry_non_idempotent=True), [Resp(429, retry_after="1"), Resp(200)], clock,
                    method="PUT", replayable=False)
    assert got.status_code == 429 and len(sent) == 1


def test_other_statuses_are_final(clock):
    for status in (200, 400, 404, 500, 502):
        got, sent = run(policy(clock), [Resp(status, retry_after="1"), Resp(200)], clock)
        assert got.status_code == status and len(sent) == 1


@pytest.mark.parametrize("bad", [dict(max_attempts=0), dict(max_attempts=1.5), dict(max_wait=-1),
                                 dict(backoff_cap=float("nan")), dict(max_delay=-0.1)])
def test_bad_options(bad):
    with pytest.raises(ValueError):
        RetryPolicy(**bad)


def test_on_retry_hook_and_log(clock, caplog):
    calls = []
    responses = [Resp(429, retry_after="1"), Resp(503, retry_after="2"), Resp(200)]
    with caplog.at_level(logging.INFO, logger="django_gcra.client"):
        run(policy(clock, on_retry=lambda *a: calls.append(a)), responses, clock)
    assert [(a, r) for a, _, r in calls] == [(1, responses[0]), (2, responses[1])]
    assert [w for _, w, _ in calls] == clock.slept
    logged = [r for r in caplog.records if r.name == "django_gcra.client"]  # (not a background flusher's)
    assert len(logged) == 2 and "429, retrying in" in logged[0].getMessage()


# --- pacing -------------------------------------------------------------------------

def test_pacing_waits_t_before_the_next_request_to_that_policy(clock):
    pol = policy(clock, pace=True)
    first, _ = run(pol, [Resp(200, ratelimit='"user";r=0;t=5')], clock, url="http://api.test/a?page=1")
    assert first.status_code == 200 and clock.slept == []
    run(pol, [Resp(200, ratelimit='"user";r=2;t=1')], clock, url="http://api.test/a?page=2")
    assert clock.slept == [5.0 + 0.5 * 0.5]  # held (t + jitter of up to backoff_base) instead of sent into a 429
    run(pol, [Resp(200)], clock, url="http://api.test/a")
    assert clock.slept == [5.25]  # r=2: nothing to wait for


def test_pacing_is_per_origin_and_policy(clock):
    pacer = Pacer(clock)
    pacer.observe("http://a.test", "/x", '"user";r=0;t=5, "tenant";r=9;t=1')
    pacer.observe("http://a.test", "/y", '"tenant";r=9;t=1')
    assert pacer.delay("http://a.test", "/x") == (5.0, "user")
    assert pacer.delay("http://a.test", "/y") == (0.0, None)   # another policy is not held up
    assert pacer.delay("http://b.test", "/x") == (0.0, None)   # another host neither
    pacer.observe("http://a.test", "/z", '"user";r=0;t=2')     # the same policy behind another path
    pacer.observe("http://a.test", "/x", '"user";r=0;t=5')
    clock.t += 1
    assert pacer.delay("http://a.test", "/x") == (4.0, "user")
    clock.t += 4
    assert pacer.delay("http://a.test", "/x") == (0.0, None)


def test_pacing_longer_than_the_budget_is_skipped(clock):
    pol = policy(clock, pace=True, max_wait=3)
    run(pol, [Resp(200, ratelimit='"user";r=0;t=60')], clock)
    got, sent = run(pol, [Resp(200)], clock)
    assert clock.slept == [] and len(sent) == 1


def test_a_shared_pacer_implies_pacing(clock):
    pacer = Pacer(clock)
    one, two = policy(clock, pacer=pacer), policy(clock, pacer=pacer)
    assert one.pace and two.pacer is pacer
    run(one, [Resp(200, ratelimit='"k";r=0;t=2')], clock)
    run(two, [Resp(200)], clock)
    assert clock.slept == [2.25]


def test_pacer_is_safe_to_share_between_threads():
    """Many threads observing and asking at once: no error, and every answer is one the
    observations could have produced (0, or the single pause that was recorded)."""
    import threading

    pacer, errors, answers = Pacer(max_routes=8), [], set()
    resume = pacer.clock() + 30

    def work(n: int) -> None:
        try:
            for i in range(300):
                path = f"/p{(n + i) % 16}"  # more paths than max_routes: eviction runs too
                pacer.observe("http://a.test", path, '"k";r=0;t=30' if i % 2 else '"k";r=1;t=1')
                wait, name = pacer.delay("http://a.test", path)
                answers.add((wait <= 0 and name is None) or (name == "k" and 0 < wait <= resume - pacer.clock() + 1))
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and answers == {True} and len(pacer._routes) <= 8


def test_logs_and_errors_name_no_query_string_or_credentials(clock, caplog):
    url = "https://user:secret@API.test:8443/v1/items?api_key=hunter2"
    with caplog.at_level(logging.DEBUG, logger="django_gcra.client"), pytest.raises(RetryBudgetExhausted) as info:
        run(policy(clock, max_attempts=2), [Resp(429, retry_after="1")] * 2, clock, url=url)
    text = str(info.value) + " ".join(r.getMessage() for r in caplog.records)
    assert "https://api.test:8443/v1/items" in text and info.value.url == "https://api.test:8443/v1/items"
    assert "hunter2" not in text and "secret" not in text


def test_a_huge_max_attempts_does_not_overflow_the_backoff(clock):
    responses = [Resp(503)] * 1500 + [Resp(200)]
    got, sent = run(policy(clock, rnd=0.5, max_attempts=2000, max_wait=1e9, backoff_cap=1.0), responses, clock)
    assert got.status_code == 200 and len(sent) == 1501 and clock.slept[-1] == 0.5
