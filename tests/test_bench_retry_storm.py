"""A scaled-down run of benchmarks/bench_retry_storm.py: 30 clients against one 5/s limit
on a real server. The helper must cost the server fewer requests per admitted request
than naive immediate retry, both measured in this run (no absolute timing is asserted)."""

from __future__ import annotations

import pytest

from benchmarks.bench_retry_storm import compare, table
from tests.support.http_servers import start_site

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.mark.parametrize("driver", ["threads", "asyncio"])
def test_the_helper_sends_fewer_requests_per_admitted_request_than_naive_retry(redis_server, driver):
    site = start_site(redis_server.url, storm_rate="5/s", storm_burst=2)
    client = redis_server.client()
    try:
        naive, helper = compare(site.url, client, clients=30, deadline=60, max_tries=1000, driver=driver,
                                names=("naive", "helper"), settle=0.5)
    finally:
        client.close()
        site.stop()
    print(table([naive, helper]))
    assert (naive.name, helper.name) == ("naive", "helper")
    assert naive.admitted == helper.admitted == 30 and naive.gave_up == helper.gave_up == 0
    assert helper.per_admitted < naive.per_admitted
