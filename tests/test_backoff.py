"""RestartBudget as a pure table (SPEC §6.2): backoff delays, jitter, and the two ceilings."""

from __future__ import annotations

import pytest

from tfunnel.config.expose import RestartPolicy
from tfunnel.upstream.backoff import JITTER, RestartBudget, Verdict

NO_JITTER = 0.5


def crash_sequence(budget: RestartBudget, *, permanent: bool, count: int,
                   start: float = 0.0) -> list[tuple[float, float | None]]:
    """Fail at once after every restart: (failure time, delay) pairs, stopping at a stop verdict."""
    now, out = start, []
    for _ in range(count):
        verdict = budget.failed(now, permanent=permanent, jitter=NO_JITTER)
        out.append((now, verdict.delay_s))
        if verdict.delay_s is None:
            break
        now += verdict.delay_s
    return out


def test_jitter_constant_is_twenty_percent() -> None:
    """The jitter spread is ±20 %."""
    assert JITTER == 0.2


def test_crash_sequence_doubles_from_one_second() -> None:
    """Five crashes in a row back off 1, 2, 4, 8, 16 s (jitter 0.5 = none)."""
    budget = RestartBudget(RestartPolicy())
    assert crash_sequence(budget, permanent=False, count=5) == [
        (0.0, 1.0), (1.0, 2.0), (3.0, 4.0), (7.0, 8.0), (15.0, 16.0)]
    assert budget.total == 5


def test_delay_is_capped_at_max_backoff() -> None:
    """The doubling stops at max_backoff_s (30 s by default)."""
    budget = RestartBudget(RestartPolicy(max_restarts=100))
    delays = [delay for _, delay in crash_sequence(budget, permanent=False, count=7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_delay_stays_at_cap_while_failures_continue() -> None:
    """An unbroken run of failures never backs off less: after the cap it stays at 30 s."""
    # The sliding window only forgives a child that stayed up; a child still failing every 30 s
    # has not recovered, so the delay must not fall back to 4 s once the early failures age out.
    budget = RestartBudget(RestartPolicy(max_restarts=100))
    delays = [delay for _, delay in crash_sequence(budget, permanent=False, count=12)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0] + [30.0] * 7


def test_custom_initial_and_cap() -> None:
    """initial_backoff_s and max_backoff_s from the restart block shape the sequence."""
    budget = RestartBudget(RestartPolicy(max_restarts=100, initial_backoff_s=0.5, max_backoff_s=3.0))
    delays = [delay for _, delay in crash_sequence(budget, permanent=False, count=6)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize(("jitter", "factor"), [(0.0, 0.8), (0.25, 0.9), (0.5, 1.0), (0.75, 1.1),
                                                (0.999999, 1.2)])
def test_jitter_scales_the_first_delay(jitter: float, factor: float) -> None:
    """jitter 0 → factor 0.8, 0.5 → 1, towards 1 → 1.2 (linear in between)."""
    budget = RestartBudget(RestartPolicy())
    verdict = budget.failed(0.0, permanent=False, jitter=jitter)
    assert verdict.delay_s == pytest.approx(1.0 * factor, abs=1e-5)


@pytest.mark.parametrize(("jitter", "delay"), [(0.0, 32 * 0.8), (0.5, 30.0), (0.999999, 30.0)])
def test_jitter_never_lifts_a_delay_past_the_cap(jitter: float, delay: float) -> None:
    """The jittered doubling (sixth failure: 32 s times [0.8, 1.2]) is clipped at the 30 s ceiling."""
    budget = RestartBudget(RestartPolicy(max_restarts=100))
    crash_sequence(budget, permanent=False, count=5)  # failures at 0, 1, 3, 7, 15
    verdict = budget.failed(31.0, permanent=False, jitter=jitter)
    assert verdict.delay_s == pytest.approx(delay, abs=1e-4)


def test_jitter_never_leaves_its_bounds() -> None:
    """Every jitter value in [0, 1) gives a delay inside [0.8, 1.2] times the base."""
    for step in range(100):
        jitter = step / 100
        budget = RestartBudget(RestartPolicy())
        bases = [1.0, 2.0, 4.0]
        for now, base in zip([0.0, 1.0, 3.0], bases, strict=True):
            verdict = budget.failed(now, permanent=False, jitter=jitter)
            assert verdict.delay_s is not None
            assert base * 0.8 - 1e-9 <= verdict.delay_s <= base * 1.2 + 1e-9


def test_sixth_crash_within_the_window_stops() -> None:
    """Default policy: the 6th failure within 60 s (at 31 s) is a crash loop → stop, no delay."""
    budget = RestartBudget(RestartPolicy())
    seq = crash_sequence(budget, permanent=False, count=10)
    assert [now for now, _ in seq] == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0]
    assert seq[-1] == (31.0, None)
    assert budget.total == 5
    verdict = RestartBudget(RestartPolicy()).failed(0.0, permanent=False)
    assert verdict == Verdict(1.0)


def test_crash_loop_reason_names_the_ceiling() -> None:
    """The stop reason says crash loop, with the restart count and the window."""
    budget = RestartBudget(RestartPolicy())
    for now in (0.0, 1.0, 3.0, 7.0, 15.0):
        assert budget.failed(now, permanent=False).delay_s is not None
    verdict = budget.failed(31.0, permanent=False)
    assert verdict.delay_s is None
    assert verdict.reason is not None
    assert "crash loop" in verdict.reason
    assert "5" in verdict.reason and "60" in verdict.reason


def test_max_restarts_zero_stops_at_the_first_failure() -> None:
    """maxRestarts 0: the first crash already stops the upstream."""
    budget = RestartBudget(RestartPolicy(max_restarts=0))
    verdict = budget.failed(0.0, permanent=False)
    assert verdict.delay_s is None
    assert verdict.reason is not None and "crash loop" in verdict.reason
    assert budget.total == 0


def test_custom_ceiling() -> None:
    """maxRestarts 2 within windowS 10: the third failure inside 10 s stops."""
    budget = RestartBudget(RestartPolicy(max_restarts=2, window_s=10.0))
    assert crash_sequence(budget, permanent=False, count=5) == [(0.0, 1.0), (1.0, 2.0), (3.0, None)]


def test_failures_spaced_beyond_the_window_never_stop() -> None:
    """A child that stays up longer than the window regains its budget: always 1 s, never stopped."""
    budget = RestartBudget(RestartPolicy())
    for i in range(50):
        verdict = budget.failed(i * 61.0, permanent=False, jitter=NO_JITTER)
        assert verdict == Verdict(1.0), i
    assert budget.total == 50


def test_window_slides() -> None:
    """Only failures inside the last window count: once the oldest ages out, a restart is granted."""
    def five_crashes() -> RestartBudget:
        budget = RestartBudget(RestartPolicy())
        for now in (0.0, 1.0, 3.0, 7.0, 15.0):
            assert budget.failed(now, permanent=False).delay_s is not None
        return budget

    # At 59 s all five restarts are inside the window: this would be the 6th → crash loop.
    assert five_crashes().failed(59.0, permanent=False).delay_s is None
    # At 61 s the restart at 0 has aged out: the 5th restart inside the window is granted.
    assert five_crashes().failed(61.0, permanent=False).delay_s is not None


def test_delay_returns_to_initial_after_a_long_uptime() -> None:
    """After a crash loop half-way, a long uptime restores the 1 s initial delay."""
    budget = RestartBudget(RestartPolicy())
    assert [d for _, d in crash_sequence(budget, permanent=False, count=4)] == [1.0, 2.0, 4.0, 8.0]
    # Restarted at 15, stayed up 100 s.
    assert budget.failed(115.0, permanent=False) == Verdict(1.0)
    assert budget.failed(116.0, permanent=False) == Verdict(2.0)


def test_permanent_failures_retry_until_the_ceiling() -> None:
    """Permanent failures are retried until permanent_failure_s after the FIRST one, then stop."""
    budget = RestartBudget(RestartPolicy())
    assert budget.failed(10.0, permanent=True).delay_s is not None
    assert budget.failed(200.0, permanent=True).delay_s is not None
    assert budget.failed(309.9, permanent=True).delay_s is not None
    verdict = budget.failed(310.0, permanent=True)
    assert verdict.delay_s is None
    assert verdict.reason is not None and "300" in verdict.reason
    assert budget.total == 3


def test_permanent_failures_do_not_hit_the_crash_loop_ceiling() -> None:
    """Twenty permanent failures inside 60 s are still retried (their ceiling is time, not count)."""
    budget = RestartBudget(RestartPolicy())
    for i in range(20):
        assert budget.failed(i * 2.0, permanent=True).delay_s is not None, i
    assert budget.total == 20


def test_permanent_schedule_under_default_policy() -> None:
    """A command that never spawns: 1, 2, 4, 8, 16, then 30 s steps, stopped at the first failure ≥ 300 s."""
    budget = RestartBudget(RestartPolicy())
    seq = crash_sequence(budget, permanent=True, count=100)
    assert [now for now, _ in seq] == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 61.0, 91.0, 121.0, 151.0, 181.0,
                                       211.0, 241.0, 271.0, 301.0]
    assert seq[-1] == (301.0, None)
    assert budget.total == 14


def test_custom_permanent_ceiling_in_reason() -> None:
    """The stop reason names the configured permanent-failure window."""
    budget = RestartBudget(RestartPolicy(permanent_failure_s=42.0))
    assert budget.failed(0.0, permanent=True).delay_s is not None
    verdict = budget.failed(42.0, permanent=True)
    assert verdict.delay_s is None
    assert verdict.reason is not None and "42 s" in verdict.reason


def test_non_permanent_failure_resets_the_permanent_clock() -> None:
    """A non-permanent failure in between means the cause healed: the 300 s start again."""
    budget = RestartBudget(RestartPolicy())
    assert budget.failed(0.0, permanent=True).delay_s is not None
    assert budget.failed(100.0, permanent=False).delay_s is not None
    assert budget.failed(200.0, permanent=True).delay_s is not None  # the clock restarts here
    assert budget.failed(450.0, permanent=True).delay_s is not None  # 250 s < 300 s
    assert budget.failed(499.0, permanent=True).delay_s is not None
    assert budget.failed(500.0, permanent=True).delay_s is None


def test_connected_resets_the_permanent_clock() -> None:
    """An upstream that connected has healed: its next permanent failure starts a fresh 300 s."""
    budget = RestartBudget(RestartPolicy())
    assert budget.failed(0.0, permanent=True).delay_s is not None
    budget.connected()
    assert budget.failed(400.0, permanent=True).delay_s is not None  # without the reset: stopped
    assert budget.failed(699.0, permanent=True).delay_s is not None
    assert budget.failed(700.0, permanent=True).delay_s is None


def test_without_connected_the_permanent_clock_runs_on() -> None:
    """Control for the test above: no reset → 400 s after the first permanent failure stops."""
    budget = RestartBudget(RestartPolicy())
    assert budget.failed(0.0, permanent=True).delay_s is not None
    assert budget.failed(400.0, permanent=True).delay_s is None


def test_total_counts_restarts() -> None:
    """`total` counts granted restarts over all time, not the stopping failure."""
    budget = RestartBudget(RestartPolicy())
    assert budget.total == 0
    for i in range(7):
        budget.failed(i * 100.0, permanent=False)
    assert budget.total == 7
    budget.failed(701.0, permanent=True)
    assert budget.total == 8
