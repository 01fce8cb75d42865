"""The three front-ends of django_gcra.client over in-process transports: what each one
sends and replays, and that importing the helper needs neither Django settings nor both
HTTP libraries."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

from django_gcra.client import AsyncRetryingTransport, RetryBudgetExhausted, RetryingAdapter, RetryingTransport

ROOT = Path(__file__).resolve().parent.parent


class Script:
    """Answers with ``statuses`` in turn (429s with Retry-After: 1), recording each request."""

    def __init__(self, *statuses: int) -> None:
        self.statuses, self.seen = list(statuses), []

    def next(self, method: str, body: bytes) -> tuple[int, dict[str, str]]:
        self.seen.append((method, body))
        status = self.statuses[min(len(self.seen), len(self.statuses)) - 1]
        return status, ({"Retry-After": "1"} if status in (429, 503) else {})


def fake_sleep(log):
    return lambda s: log.append(s)


# --- httpx --------------------------------------------------------------------------

def httpx_client(script: Script, slept: list, **options) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        status, headers = script.next(request.method, request.read())
        return httpx.Response(status, headers=headers, content=b'{"error": "too_many_requests"}')

    return httpx.Client(transport=RetryingTransport(httpx.MockTransport(handler), sleep=fake_sleep(slept), **options))


def test_httpx_retries_and_replays_the_body():
    script, slept = Script(429, 503, 200), []
    with httpx_client(script, slept, random=lambda: 0.0) as client:
        response = client.put("http://api.test/x", content=b"payload")
    assert response.status_code == 200 and slept == [1.0, 1.0]
    assert script.seen == [("PUT", b"payload")] * 3


def test_httpx_post_is_not_retried_by_default_and_streams_never():
    script, slept = Script(429, 200), []
    with httpx_client(script, slept) as client:
        assert client.post("http://api.test/x", json={"a": 1}).status_code == 429
    script, slept = Script(429, 200), []
    with httpx_client(script, slept, retry_non_idempotent=True) as client:
        assert client.post("http://api.test/x", json={"a": 1}).status_code == 200
    script, slept = Script(429, 200), []
    with httpx_client(script, slept, retry_non_idempotent=True) as client:
        assert client.put("http://api.test/x", content=iter([b"a", b"b"])).status_code == 429
        assert len(script.seen) == 1 and slept == []


def test_httpx_exhausted_carries_a_readable_response():
    script, slept = Script(429), []
    with httpx_client(script, slept, max_attempts=2) as client, pytest.raises(RetryBudgetExhausted) as info:
        client.get("http://api.test/x")
    assert info.value.response.status_code == 429 and info.value.response.json()["error"] == "too_many_requests"
    assert info.value.attempts == 2 and len(slept) == 1


def test_async_transport_awaits_its_sleep():
    script, slept = Script(503, 200), []

    async def handler(request):
        status, headers = script.next(request.method, await request.aread())
        return httpx.Response(status, headers=headers)

    async def asleep(seconds):
        slept.append(seconds)
        await asyncio.sleep(0)

    async def main():
        transport = AsyncRetryingTransport(httpx.MockTransport(handler), sleep=asleep, random=lambda: 0.5)
        async with httpx.AsyncClient(transport=transport) as client:
            return await client.delete("http://api.test/x")

    assert asyncio.run(main()).status_code == 200 and slept == [1.25]


def test_transport_options_are_checked():
    with pytest.raises(TypeError):
        RetryingTransport(verify=False)  # connection options belong to the inner transport
    with pytest.raises(ValueError):
        RetryingTransport(max_attempts=0)


# --- requests -----------------------------------------------------------------------

class FakeAdapter(BaseAdapter):
    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script, self.closed = script, False

    def send(self, request, **kwargs):
        body = request.body
        if hasattr(body, "__next__"):
            body = b"".join(body)
        status, headers = self.script.next(request.method, body.encode() if isinstance(body, str) else body)
        raw = urllib3.HTTPResponse(body=io.BytesIO(b'{"error": "x"}'), headers=headers, status=status,
                                   preload_content=False)
        return HTTPAdapter().build_response(request, raw)

    def close(self):
        self.closed = True


def requests_session(script: Script, slept: list, **options) -> tuple[requests.Session, RetryingAdapter]:
    session = requests.Session()
    adapter = RetryingAdapter(FakeAdapter(script), sleep=fake_sleep(slept), **options)
    session.mount("http://", adapter)
    return session, adapter


def test_requests_adapter_retries_and_replays_the_body():
    script, slept = Script(429, 200), []
    session, adapter = requests_session(script, slept, random=lambda: 0.0)
    assert session.put("http://api.test/x", data=b"payload").status_code == 200
    assert script.seen == [("PUT", b"payload")] * 2 and slept == [1.0]
    session.close()
    assert adapter.inner.closed


def test_requests_adapter_idempotency_and_generators():
    script, slept = Script(429, 200), []
    session, _ = requests_session(script, slept)
    assert session.post("http://api.test/x", json={"a": 1}).status_code == 429 and len(script.seen) == 1
    script, slept = Script(429, 200), []
    session, _ = requests_session(script, slept, retry_non_idempotent=True)
    assert session.put("http://api.test/x", data=(c for c in [b"a", b"b"])).status_code == 429
    assert len(script.seen) == 1 and slept == []


def test_requests_adapter_exhausted_and_adapter_options():
    script, slept = Script(503), []
    session, _ = requests_session(script, slept, max_attempts=3)
    with pytest.raises(RetryBudgetExhausted) as info:
        session.get("http://api.test/x")
    assert info.value.attempts == 3 and info.value.response.json() == {"error": "x"} and len(slept) == 2
    adapter = RetryingAdapter(pool_maxsize=3, max_attempts=5)
    assert adapter._pool_maxsize == 3 and adapter.retry.max_attempts == 5


# --- imports ------------------------------------------------------------------------

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == {lib!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
import django_gcra.client as c
from django.conf import settings
assert not settings.configured
try:
    getattr(c, {missing!r})
except ImportError as exc:
    assert "pip install" in str(exc), exc
else:
    raise SystemExit("no ImportError")
print(getattr(c, {present!r}).__name__)
"""


@pytest.mark.parametrize("lib, missing, present", [("httpx", "RetryingTransport", "RetryingAdapter"),
                                                   ("requests", "RetryingAdapter", "AsyncRetryingTransport")])
def test_import_needs_no_settings_and_only_one_library(lib, missing, present):
    code = BLOCK.format(lib=lib, missing=missing, present=present)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == present
