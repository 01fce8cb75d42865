"""A worker process for tests/test_slots_load.py: takes concurrency slots, says so, and
holds them (its keeper thread extending them) until it is killed."""

from __future__ import annotations

import sys
import time

from tests.support.workers import setup_django


def hold(redis_url: str, gcra: dict, policy: str, descriptors: dict, count: int) -> None:
    setup_django(redis_url, gcra)
    from django_gcra import decide

    held = [decide(policy, descriptors) for _ in range(count)]
    print("held" if all(d.allowed for d in held) else "refused", flush=True)
    deadline = time.monotonic() + 120  # bounded: the test kills it long before
    while time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    import json

    hold(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5]))
