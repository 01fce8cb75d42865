"""The script driven by a fake clock, and what it stores in the pure twins' terms
(tests/test_lua_twin.py, tests/test_shaping_twin.py)."""

from __future__ import annotations

from hypothesis import strategies as st

from django_gcra.algorithm import GCRA, SLIDING_LOG, SLIDING_WINDOW
from django_gcra.backends.redis import SCRIPT

CLOCK_LINE = "local t = redis.call('TIME')"

# (algorithm, a, b, enforce): GCRA interval us and burst, or a sliding period us and N.
# Periods and intervals of 5 s and more: keys expire in Redis's real time (PX), so a
# shorter one could expire between two fake-clock steps.
mixed_limit = st.one_of(
    st.tuples(st.just(GCRA), st.integers(5_000_000, 86_400_000_000), st.integers(1, 20), st.booleans()),
    st.tuples(st.sampled_from([SLIDING_LOG, SLIDING_WINDOW]), st.integers(5_000_000, 120_000_000),
              st.integers(1, 20), st.booleans()),
)


def clocked_script() -> str:
    """The shipped script with its one TIME call replaced by two trailing ARGV slots."""
    assert SCRIPT.count(CLOCK_LINE) == 1
    return SCRIPT.replace(CLOCK_LINE, "local t = {ARGV[#ARGV - 1], ARGV[#ARGV]}; ARGV[#ARGV] = nil; ARGV[#ARGV] = nil")


def stored_state(client, key: str, algorithm: int):
    """What the script stores for one limit, in the twin's terms."""
    if algorithm == GCRA:
        value = client.get(key)
        return None if value is None else int(value)
    if algorithm == SLIDING_LOG:
        entries = client.zrange(key, 0, -1, withscores=True)
        return tuple(sorted(int(score) for _, score in entries)) or None
    value = client.get(key)
    return None if value is None else tuple(int(part) for part in value.split(b":"))


def assert_stored(client, keys, limits, states: list, writes) -> None:
    """Apply the twin's ``writes`` to ``states`` and check each key holds what the twin says."""
    for i, write in enumerate(writes):
        if write is not None:
            states[i] = write
        stored = stored_state(client, keys[i], limits[i][0])
        if limits[i][0] == SLIDING_LOG and states[i] is not None:
            # Redis trims the log when it writes; the twin's kept state may hold entries that left.
            assert stored == (tuple(sorted(states[i])) or None)
        else:
            assert stored == states[i]


def clocked_settle_script() -> str:
    """The shipped settle script with its one TIME call replaced, as ``clocked_script``."""
    from django_gcra.backends.redis import SETTLE_SCRIPT

    assert SETTLE_SCRIPT.count(CLOCK_LINE) == 1
    return SETTLE_SCRIPT.replace(CLOCK_LINE,
                                 "local t = {ARGV[#ARGV - 1], ARGV[#ARGV]}; ARGV[#ARGV] = nil; ARGV[#ARGV] = nil")


class FakeCalendar:
    """Period starts on a grid of uneven lengths (as days across DST changes, or months):
    ``around(now, shift)`` gives the four starts the script is sent, the store's ``now``
    in the first, second or third period of them (``shift`` -1, 0, 1)."""

    def __init__(self, origin: int, lengths: list[int]) -> None:
        self.starts = [origin - 10 * sum(lengths)]
        for length in lengths * 300:
            self.starts.append(self.starts[-1] + length)

    def around(self, now: int, shift: int = 0) -> tuple[int, int, int, int]:
        i = max(k for k, s in enumerate(self.starts) if s <= now) + shift
        return tuple(self.starts[i - 1:i + 3])  # type: ignore[return-value]
