"""The compiled event loop and process driver (sim.run_events, fastpath.Driven) against SimPy's
own (Environment.run, Process): the same events in the same order, the same state left behind."""

from __future__ import annotations

from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import pytest
import simpy

from llmsim.fastpath import Driven, Timer
from llmsim.sim import events_pending, run_events

Trace = list[tuple[float, str]]


def _toy(
    env: simpy.Environment,
    start: Callable[[simpy.Environment, Generator], Any],
    trace: Trace,
    timers: bool = False,
) -> None:
    """Processes whose events tie in time and priority, start others mid-run (their Initialize is
    urgent) and wait on events others trigger, some landing exactly on the horizons used below.
    The tickers wait on SimPy's Timeouts, or on those of a fastpath.Timer each, which stand in
    for them; with timers, the gate is a Timer's ``hold``/``fire`` (SimPy's event/succeed) and a
    callback is queued by ``Timer.call`` (a Timeout with a callback)."""
    gate_timer = Timer(env)
    gate = gate_timer.hold() if timers else env.event()

    def call(delay: float, callback: Callable[[Any], None]) -> None:
        if timers:
            Timer(env).call(delay, callback)
        else:
            simpy.events.Timeout(env, delay).callbacks.append(callback)  # type: ignore[union-attr]

    def ticker(name: str, dt: float, n: int) -> Generator[simpy.Event, Any, None]:
        after = Timer(env).after if timers else partial(simpy.events.Timeout, env)
        for _ in range(n):
            yield after(dt)
            trace.append((env.now, name))
            if name == "b" and env.now == 3.0:
                start(env, child(f"{name}-child"))
                gate_timer.fire(gate)
                call(0.5, lambda _event: trace.append((env.now, "called")))
                call(0.0, lambda _event: trace.append((env.now, "called now")))

    def child(name: str) -> Generator[simpy.Event, Any, None]:
        trace.append((env.now, name + " starts"))
        yield simpy.events.Timeout(env, 0)
        trace.append((env.now, name))
        yield simpy.events.Timeout(env, 2.0)
        trace.append((env.now, name + " again"))

    def waiter() -> Generator[simpy.Event, Any, None]:
        yield gate
        trace.append((env.now, "gate open"))
        yield gate  # (processed already: resumed at once)
        trace.append((env.now, "gate again"))

    start(env, ticker("a", 1.0, 9))
    start(env, ticker("b", 1.5, 6))
    start(env, ticker("c", 0.5, 14))
    start(env, waiter())


def _process(env: simpy.Environment, gen: Generator) -> None:
    env.process(gen)


def _driven(env: simpy.Environment, gen: Generator) -> None:
    Driven(env, gen)


def _queue(env: simpy.Environment) -> list[tuple[float, int]]:
    return sorted((t, p) for t, p, _, _ in env._queue)  # type: ignore[attr-defined]


@pytest.mark.parametrize("timers", [False, True])
@pytest.mark.parametrize("start", [_process, _driven])
@pytest.mark.parametrize("horizons", [[None], [3.0, 5.0, None], [0.5, 3.0, 4.5, 6.0], [2.25, 7.0]])
def test_run_events_is_simpy_run(start: Callable, horizons: list[float | None], timers: bool) -> None:
    # SimPy alone (its loop, its processes, its Timeout) against each mix of the compiled pieces,
    # and SimPy's own loop over a Timer's events (it must process one as it processes a Timeout)
    runs = []
    for loop, how, ticks in (
        ("simpy", _process, False),
        ("simpy", start, timers),
        ("compiled", start, timers),
    ):
        env, trace = simpy.Environment(), []
        _toy(env, how, trace, ticks)
        for until in horizons:
            if loop == "simpy":
                env.run(until=until)
            else:
                run_events(env, until)
            trace.append((env.now, f"stopped at {until}"))
        runs.append((trace, env.now, _queue(env), events_pending(env)))
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0][0]) > 20


def test_timer_queues_as_simpy_timeout() -> None:
    # the same heap entries (time, priority, event id) SimPy's Timeouts make, its refusal of a
    # negative delay, and a processed event queued again where one is still pending is not
    entries = []
    for timers in (False, True):
        env = simpy.Environment(initial_time=2.5)
        after = Timer(env).after if timers else partial(simpy.events.Timeout, env)
        first = after(1.0)
        second = after(0.1)  # (the first still queued: a new event)
        assert second is not first
        env.step()  # (the second processed)
        third = after(0.2)
        assert (third is second) == timers  # (reused once processed)
        entries.append([(t, p, eid) for t, p, eid, _ in env._queue])  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="Negative delay"):
            after(-1.0)
    assert entries[0] == entries[1] == [((2.5 + 0.1) + 0.2, 1, 2), (2.5 + 1.0, 1, 0)]


def test_driven_is_simpy_process() -> None:
    """The same trace, and the same queue at every instant a process ends (SimPy schedules an
    event when a process returns, which ``env.peek()`` sees: the autoscaler reads it)."""
    runs = []
    for start in (_process, _driven):
        env, trace = simpy.Environment(), []
        _toy(env, start, trace)
        seen = []
        for until in (2.0, 3.0, 3.5, 5.0, 6.5, 9.0):
            env.run(until=until)
            seen.append((env.now, env.peek(), _queue(env)))
        env.run()
        runs.append((trace, seen))
    assert runs[0] == runs[1]


def test_run_events_raises_a_failed_event_as_simpy_does() -> None:
    env = simpy.Environment()
    env.event().fail(KeyError("lost"))
    with pytest.raises(KeyError, match="lost"):
        run_events(env, None)
    with pytest.raises(ValueError, match="greater than the current"):
        run_events(env, env.now)


@pytest.mark.parametrize("start", [_process, _driven])
def test_a_process_that_returned_is_still_in_the_queue_for_that_instant(start: Callable) -> None:
    """SimPy schedules a process's own event when it returns; a process waking at the same instant
    sees it in ``env.peek()`` (what the autoscaler reads to tell whether anything else is coming)."""
    env = simpy.Environment()
    seen: list[float] = []

    def ends_at_1() -> Generator[simpy.Event, Any, None]:
        yield simpy.events.Timeout(env, 1.0)

    def looks_at_1() -> Generator[simpy.Event, Any, None]:
        yield simpy.events.Timeout(env, 1.0)
        seen.append(env.peek())

    start(env, ends_at_1())
    env.process(looks_at_1())
    simpy.events.Timeout(env, 5.0)
    env.run()
    assert seen == [1.0]


def test_a_timer_event_shows_simpy_s_state() -> None:
    env = simpy.Environment()
    event = Timer(env).after(1.0)
    timeout = simpy.events.Timeout(env, 1.0)
    for e in (event, timeout):
        assert e.triggered and not e.processed and e.ok and e.value is None
    env.run()
    assert event.processed and timeout.processed


def test_a_held_timer_event_is_simpy_s_untriggered_event() -> None:
    env = simpy.Environment()
    timer = Timer(env)
    held, event = timer.hold(), env.event()
    for e in (held, event):
        assert not e.triggered and not e.processed
    timer.fire(held)
    timer.fire(event)  # (SimPy's own event: succeed)
    for e in (held, event):
        assert e.triggered and not e.processed
    env.run()
    assert held.processed and event.processed
    assert timer.hold() is held  # (processed, nobody waits on it: reused)
