import pytest

from django_gcra.rates import Rate, parse_rate


@pytest.mark.parametrize(
    "text, count, period",
    [("5/s", 5, 1), ("5/m", 5, 60), ("100/h", 100, 3600), ("7/d", 7, 86400), ("5/sec", 5, 1),
     ("5/second", 5, 1), ("5/min", 5, 60), ("5/minute", 5, 60), ("5/hour", 5, 3600), ("5/day", 5, 86400),
     ("10/30s", 10, 30), ("10/5m", 10, 300), (" 3 / 2h ", 3, 7200), ("5/M", 5, 60)],
)
def test_grammar(text, count, period):
    assert parse_rate(text) == Rate(count, period)


@pytest.mark.parametrize("text", ["", "5", "5/", "/s", "5/w", "0/s", "5/0s", "-1/s", "5.5/s", "5/s/s", "abc"])
def test_bad_rates_raise(text):
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)


@pytest.mark.parametrize("value", [None, 5, ("5", "s")])
def test_non_strings_raise(value):
    with pytest.raises(ValueError, match="string"):
        parse_rate(value)


def test_interval_rounds_up_so_never_over_admits():
    assert Rate(3, 1).interval == 333_334
    assert Rate(5, 1).interval == 200_000


def test_more_than_one_per_microsecond_is_refused():
    with pytest.raises(ValueError, match="microsecond"):
        parse_rate("2000001/s")
