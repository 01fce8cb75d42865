import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from django_gcra.keys import build_key, escape

HOSTILE = ["", "%", "~", "#", "a{b}", "}", "{", "a:b", "x\ny", "\x00", "ü", "😀", "x" * 10_000, "acme", "ACME"]


@given(st.text(), st.text())
def test_escaping_is_injective(a, b):
    if a != b:
        assert escape(a) != escape(b)


@given(st.text())
def test_escaped_values_carry_no_separator_or_brace(value):
    escaped = escape(value)
    assert escaped and not set(escaped) & set(":{}\n")
    assert len(escaped) <= 128


@pytest.mark.parametrize("value", HOSTILE)
def test_every_key_of_a_decision_shares_the_shard_slot(value):
    shard = escape(value)
    tenant = build_key("rl", shard, "api", "tenant", [shard])
    user = build_key("rl", shard, "api", "user", [shard, escape("7")])
    assert key_slot(tenant.encode()) == key_slot(user.encode()) == key_slot(("{" + shard + "}").encode())


def test_hostile_values_give_distinct_keys():
    keys = {build_key("rl", escape(v), "api", "tenant", [escape(v)]) for v in HOSTILE}
    assert len(keys) == len(HOSTILE)
