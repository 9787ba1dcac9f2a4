"""Unit tests of ``_delivery``, the network sinks' one delivery layer (run by every sink that bakes it)."""

from __future__ import annotations

import time

import pytest
from exporter_calls import is_permanent

from traceml_exporter_example._delivery import (
    REDACTED,
    Backoff,
    duration,
    environment,
    key_values,
    redact,
    retry,
    time_left,
    until,
)

QUICK = Backoff(first_s=0.01, cap_s=0.02, jitter=0.5)


class Flaky(Exception):
    """What the tests' classifier calls transient."""


@pytest.mark.parametrize(
    ("text", "bare", "seconds"),
    [
        ("5", "s", 5.0),
        ("5", "ms", 0.005),
        ("2.5s", "ms", 2.5),
        ("500ms", "s", 0.5),
        (" 750 MS ", "s", 0.75),
        ("", "s", 7.0),
    ],
)
def test_a_duration_has_a_unit_or_the_variables_own(text: str, bare: str, seconds: float) -> None:
    assert duration(text, "T", default_s=7.0, bare=bare) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "0", "-1", "inf", "nan", "s", "5 minutes", "601"])
def test_a_bad_duration_names_its_variable_and_is_permanent(text: str) -> None:
    with pytest.raises(ValueError, match="SOME_TIMEOUT") as raised:
        duration(text, "SOME_TIMEOUT", default_s=5.0, most_s=600)
    assert is_permanent(raised.value)


def test_a_duration_keeps_its_lower_bound() -> None:
    assert duration("2", "T", default_s=8.0, least_s=2.0) == 2.0
    with pytest.raises(ValueError, match="from 2 s"):
        duration("1999ms", "T", default_s=8.0, least_s=2.0)


def test_key_values_are_percent_decoded() -> None:
    assert key_values("a=1, b%3Dc=x%2Cy,,", "V", "k=v") == {"a": "1", "b=c": "x,y"}


def test_a_bad_key_value_item_is_named_by_number_never_shown() -> None:
    with pytest.raises(ValueError, match="item 2 of V") as raised:
        key_values("a=1,secret-token", "V", "k=v")
    assert "secret-token" not in str(raised.value)
    assert is_permanent(raised.value)


def test_environment_copies_only_the_prefixed_variables() -> None:
    source = {"SINK_URL": "u", "SINK_TIMEOUT": "5", "OTHER": "x"}
    copied = environment(("SINK_",), source)
    assert copied == {"SINK_URL": "u", "SINK_TIMEOUT": "5"}
    source["SINK_URL"] = "changed"
    assert copied["SINK_URL"] == "u"


def test_redact_replaces_the_longest_secret_first() -> None:
    assert redact("token abc and abcdef", ["abc", "abcdef", ""]) == (
        f"token {REDACTED} and {REDACTED}"
    )
    assert redact("pw=hunter2", ["hunter2"], "***") == "pw=***"


def test_backoff_doubles_to_its_cap_with_jitter() -> None:
    backoff = Backoff(first_s=0.1, cap_s=1.0, jitter=0.2)
    for attempt, base in [(0, 0.1), (1, 0.2), (3, 0.8), (4, 1.0), (10, 1.0)]:
        for _ in range(50):
            assert base * 0.8 <= backoff.delay(attempt) <= base * 1.2


def test_retry_retries_what_is_transient_until_it_succeeds() -> None:
    failures = [Flaky("one"), Flaky("two")]

    def attempt() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    got = retry(
        attempt,
        deadline=until(5),
        backoff=QUICK,
        transient=lambda error: isinstance(error, Flaky),
        give_up=lambda error, _n, _w: error,
    )
    assert got == "done"


def test_retry_raises_what_is_not_transient_at_once() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise KeyError("permanent")

    with pytest.raises(KeyError):
        retry(
            attempt,
            deadline=until(5),
            backoff=QUICK,
            transient=lambda error: isinstance(error, Flaky),
            give_up=lambda error, _n, _w: error,
        )
    assert calls == [1]


def test_retry_gives_up_before_a_wait_that_would_pass_the_deadline() -> None:
    started = time.monotonic()

    def attempt() -> None:
        raise Flaky("still down")

    with pytest.raises(TimeoutError, match=r"gave up after \d+ tries") as raised:
        retry(
            attempt,
            deadline=until(0.3),
            backoff=QUICK,
            transient=lambda error: isinstance(error, Flaky),
            give_up=lambda _error, n, _w: TimeoutError(f"gave up after {n} tries"),
            wait_at_least=lambda _error: 0.05,  # a Retry-After
            reserve_s=0.1,
        )
    assert time.monotonic() - started < 0.3
    assert isinstance(raised.value.__cause__, Flaky)


def test_time_left_counts_down_to_the_deadline() -> None:
    deadline = until(10)
    assert 9 < time_left(deadline) <= 10
    assert time_left(until(-1)) < 0
