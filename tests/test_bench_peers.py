"""The comparative benchmark's own logic: what each algorithm promises, and its policies parse."""

from __future__ import annotations

import pytest

from benchmarks.peers.contenders import COUNTER, FIXED, GCRA, LOG, STRICT, build, policies, promise
from django_gcra.policy import Lease, parse_policy


def test_gcra_promises_burst_plus_elapsed_times_rate():
    assert promise(GCRA, STRICT, 100.0, 103.0) == pytest.approx(10 + 3 * 50)


def test_fixed_window_promises_limit_per_clock_second_touched():
    assert promise(FIXED, STRICT, 100.9, 103.1) == 4 * 50  # seconds 100, 101, 102, 103
    assert promise(FIXED, STRICT, 100.0, 100.5) == 50


@pytest.mark.parametrize("algorithm", [LOG, COUNTER])
def test_windows_starting_at_the_first_hit_promise_limit_per_started_second(algorithm):
    assert promise(algorithm, STRICT, 100.9, 103.1) == 3 * 50  # 2.2 s: windows at 0, 1 and 2 s
    assert promise(algorithm, STRICT, 100.0, 100.5) == 50


def test_benchmark_policies_parse_without_problems():
    problems = []
    parsed = {name: parse_policy(name, raw, {"tenant": "x"}, problems) for name, raw in policies().items()}
    assert problems == []
    assert parsed["lease-loose"].lease == Lease(10, 1.0)
    assert [limit.name for limit in parsed["multi-strict"].limits] == ["tenant", "user"]


def test_leased_contender_declines_the_two_limit_case():
    assert build("django_gcra_leased", "redis://127.0.0.1:1/0", two=True) is None


def test_command_names_are_read_from_packed_resp_arrays():
    import hiredis

    from benchmarks.wire import command_names

    tricky = "*3\r\n$3\r\nSET\r\n"  # an argument that looks like a command
    packed = hiredis.pack_command(("EVALSHA", "abc", 1, tricky, 5)) + hiredis.pack_command(("GET", "k"))
    assert command_names(packed) == ["evalsha", "get"]


def test_sent_commands_counts_prepacked_and_redis_py_writes(redis_server):
    from benchmarks.wire import sent_commands
    from django_gcra.backends.direct import DirectRunner

    client = redis_server.client()
    runner = DirectRunner(client.connection_pool)
    client.ping(), runner("PING")  # connect first: the handshakes are not what is counted
    with sent_commands() as sent:
        client.ping()
        runner("ECHO", "x")
        with client.pipeline(transaction=False) as pipe:
            pipe.get("a").get("b").execute()
    assert sent == ["ping", "echo", "get", "get"]
    client.close()


def test_interleaved_alternates_the_two_contenders_on_the_same_workload():
    from benchmarks.peers.contenders import Contender
    from benchmarks.peers.measure import interleaved

    calls = []
    a = Contender("a", GCRA, lambda t, u: calls.append(("a", u)) or True)
    b = Contender("b", GCRA, lambda t, u: calls.append(("b", u)) or True)
    summed, medians = interleaved(a, b, lambda i: ("t", f"u{i}"), 3, 2, 10)
    assert len(summed) == len(medians) == 2 and all(r > 0 for r in summed + medians)
    assert calls == [("b", "u10"), ("a", "u10"), ("a", "u11"), ("b", "u11"), ("b", "u12"), ("a", "u12"),
                     ("b", "u13"), ("a", "u13"), ("a", "u14"), ("b", "u14"), ("b", "u15"), ("a", "u15")]
