"""TokenRelay and TokenEvents: a request's progress from the engine's thread to its coroutine, one wake-up of the
event loop for everything pushed before the loop got to it, nothing lost, the latest state kept."""

from __future__ import annotations

import asyncio
import threading

from budgetscope.engine.token_stream import TokenEvents, TokenRelay


class CountingLoop:
    """Counts the event loop's cross-thread calls (each one a write to its self-pipe)."""

    def __init__(self, loop):
        self.loop, self.calls = loop, 0

    def call_soon_threadsafe(self, fn, *args):
        self.calls += 1
        return self.loop.call_soon_threadsafe(fn, *args)

    def create_future(self):
        return self.loop.create_future()


def test_a_burst_of_pushes_is_one_wake_up_and_each_request_sees_its_latest_count():
    async def main():
        counting = CountingLoop(asyncio.get_running_loop())
        relay = TokenRelay(counting)
        events = [TokenEvents(relay) for _ in range(64)]
        seen = {}

        async def consume(i, ev):
            sent, counts = 10, []
            while True:
                count, done = await ev.wait_past(sent)
                counts.append(count)
                sent = count
                if done:
                    seen[i] = counts
                    return

        tasks = [asyncio.create_task(consume(i, ev)) for i, ev in enumerate(events)]
        await asyncio.sleep(0)

        def engine_thread():  # three steps of 64 sequences, pushed while the loop is busy elsewhere
            for step in range(1, 4):
                for ev in events:
                    relay.push(ev, 10 + step, step == 3)

        thread = threading.Thread(target=engine_thread)
        thread.start()
        thread.join()
        await asyncio.gather(*tasks)
        return counting.calls, seen

    calls, seen = asyncio.run(main())
    assert calls == 1  # 192 pushes before the loop ran: one wake-up
    assert all(counts == [13] for counts in seen.values())  # the latest state, all tokens at once
    assert len(seen) == 64


def test_pushes_after_a_drain_wake_the_loop_again_and_none_is_lost():
    async def main():
        counting = CountingLoop(asyncio.get_running_loop())
        relay = TokenRelay(counting)
        ev = TokenEvents(relay)
        got = []
        for n in range(1, 6):
            threading.Thread(target=relay.push, args=(ev, n, n == 5)).start()
            got.append(await ev.wait_past(n - 1))
        return counting.calls, got

    calls, got = asyncio.run(main())
    assert got == [(1, False), (2, False), (3, False), (4, False), (5, True)]
    assert calls == 5


def test_finished_with_no_new_token_still_wakes_the_request():
    async def main():
        relay = TokenRelay(asyncio.get_running_loop())
        ev = TokenEvents(relay)
        relay.push(ev, 7, True)  # the engine ended it (deadline, error) without a token
        return await asyncio.wait_for(ev.wait_past(7), 5)

    assert asyncio.run(main()) == (7, True)
