"""Worker processes for the lease tests: tests.support.workers.hammer, plus this process's lease counters."""

from __future__ import annotations

from dataclasses import asdict

from tests.support.workers import hammer


def lease_hammer(redis_url: str, gcra: dict, policy: str, descriptors: dict, start_at: float, duration: float,
                 max_calls: int = 200_000) -> tuple[int, int, float, float, dict]:
    """``hammer`` with leases; also return this process's ``LeaseStats`` for the policy as a dict."""
    admitted, calls, first, last = hammer(redis_url, gcra, policy, descriptors, start_at, duration, max_calls)
    from django_gcra.leases import lease_stats

    return admitted, calls, first, last, asdict(lease_stats()[policy])
