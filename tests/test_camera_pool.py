"""CameraPool: every index exactly once, across the caller and the workers, errors re-raised; one lane per
camera (in order, never twice at once) and no barrier between submitted sets."""
from __future__ import annotations

import threading
import time

import pytest

from dvpipe._camera_pool import CameraPool, Ticket


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("n", [0, 1, 6, 13])
def test_every_index_runs_exactly_once(threads, n):
    pool = CameraPool(threads)
    try:
        for _ in range(50):
            seen = []
            lock = threading.Lock()

            def fn(i):
                with lock:
                    seen.append(i)

            pool.run(fn, n)
            assert sorted(seen) == list(range(n))
    finally:
        pool.close()


def test_work_is_shared_between_the_caller_and_the_workers():
    pool = CameraPool(3)
    names = set()
    worker_started = threading.Event()

    def fn(i):
        names.add(threading.current_thread().name)
        if threading.current_thread() is threading.main_thread():
            # the caller holds its first item until a worker has taken one (an event, not a race with a sleep)
            assert worker_started.wait(30), "no worker thread took an item"
        else:
            worker_started.set()

    try:
        pool.run(fn, 6)
    finally:
        pool.close()
    assert threading.current_thread().name in names  # the caller works too
    assert len(names) >= 2, names


def test_the_first_error_is_raised_after_every_index_ran_and_the_pool_stays_usable():
    pool = CameraPool(2)
    ran = []

    def fn(i):
        ran.append(i)
        if i == 2:
            raise KeyError("camera 2")

    try:
        with pytest.raises(KeyError, match="camera 2"):
            pool.run(fn, 5)
        assert sorted(ran) == [0, 1, 2, 3, 4]
        ran.clear()
        pool.run(lambda i: ran.append(i), 3)
        assert sorted(ran) == [0, 1, 2]
    finally:
        pool.close()


def test_close_stops_the_workers_and_is_idempotent():
    pool = CameraPool(3)
    workers = list(pool._threads)
    pool.run(lambda i: None, 4)
    pool.close()
    pool.close()
    assert not any(t.is_alive() for t in workers)


def test_close_settles_submissions_queued_behind_a_running_item():
    """A set waiting in a lane whose item is still running when the pool closes is skipped: its waiter
    returns instead of waiting for ever."""
    pool = CameraPool(2)  # one worker
    started, go = threading.Event(), threading.Event()
    running = pool.submit(lambda i: (started.set(), go.wait(5)), 1)
    assert started.wait(5)
    behind = pool.submit(lambda i: None, 1)  # queued behind it in lane 0
    closer = threading.Thread(target=pool.close)
    closer.start()
    time.sleep(0.05)
    go.set()
    closer.join(5)
    assert running.settled() and behind.settled() and behind.skipped == 1 and behind.done == 0
    pool.join(behind)  # returns


def test_ctrl_c_while_the_caller_waits_returns_after_started_items_and_never_overlaps_the_next_run():
    import signal

    pool = CameraPool(2)
    active, overlaps, started = {}, [], []
    lock = threading.Lock()

    def make(tag, worker_sleep):
        def fn(i):
            with lock:
                if i in active:
                    overlaps.append((i, active[i], tag))
                active[i] = tag
                started.append((tag, i))
            on_worker = threading.current_thread() is not threading.main_thread()
            time.sleep(worker_sleep if on_worker else 0.01)
            with lock:
                active.pop(i, None)
        return fn

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # arrives while the caller waits for the slow worker item
        with pytest.raises(KeyboardInterrupt):
            pool.run(make("A", worker_sleep=0.5), 8)
        assert not active  # every started item of A had finished when run() raised
        pool.run(make("B", worker_sleep=0.01), 8)
        assert overlaps == [] and sorted(i for t, i in started if t == "B") == list(range(8))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        pool.close()


def test_keyboard_interrupt_in_an_item_stops_starting_new_ones():
    pool = CameraPool(1)  # the caller alone: items run in order
    ran = []

    def fn(i):
        ran.append(i)
        if i == 1:
            raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            pool.run(fn, 5)
        assert ran == [0, 1]
    finally:
        pool.close()


def test_an_unclosed_pool_stops_its_workers_when_collected():
    import gc

    pool = CameraPool(3)
    workers = list(pool._threads)
    del pool
    gc.collect()
    for t in workers:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in workers)


def test_keyboard_interrupt_in_a_worker_item_cancels_the_rest_without_hanging():
    pool = CameraPool(2)
    ran, lock = [], threading.Lock()

    def fn(i):
        with lock:
            ran.append(i)
        if i == 3:
            raise KeyboardInterrupt
        time.sleep(0.01)

    try:
        with pytest.raises(KeyboardInterrupt):
            pool.run(fn, 40)
        assert 3 in ran and len(ran) < 40  # the items not yet started were skipped
        ran.clear()
        pool.run(fn, 3)  # indices 0..2: none raises
        assert sorted(ran) == [0, 1, 2]
    finally:
        pool.close()


def test_a_lane_runs_its_items_in_submission_order_and_never_two_at_once():
    """Several sets submitted ahead: camera i's item of set k+1 starts only after its item of set k ended
    (a decoder's state), while other lanes run on; checked against a per-lane log."""
    import random

    pool = CameraPool(3)
    pool.grow(3)
    lock = threading.Lock()
    running, log, overlaps = set(), {i: [] for i in range(6)}, []
    rng = random.Random(7)
    delays = [[rng.random() * 0.004 for _ in range(6)] for _ in range(20)]

    def make(k):
        def fn(i):
            with lock:
                if i in running:
                    overlaps.append((k, i))
                running.add(i)
            time.sleep(delays[k][i])
            with lock:
                running.discard(i)
                log[i].append(k)
        return fn

    try:
        tickets = [pool.submit(make(k), 6) for k in range(20)]
        for t in tickets:
            pool.wait(t)
    finally:
        pool.close()
    assert overlaps == []
    assert all(log[i] == list(range(20)) for i in range(6)), log


def test_the_next_set_starts_before_the_slowest_camera_of_this_one_ends():
    """No barrier: with camera 0 of set 0 held back, set 1's other cameras run to completion meanwhile."""
    pool = CameraPool(2)
    pool.grow(2)
    release = threading.Event()
    done1 = []

    def set0(i):
        if i == 0:
            assert release.wait(30)

    def set1(i):
        done1.append(i)

    try:
        t0 = pool.submit(set0, 3)
        t1 = pool.submit(set1, 3)
        deadline = time.monotonic() + 30
        while sorted(done1) != [1, 2] and time.monotonic() < deadline:
            time.sleep(0.001)
        assert sorted(done1) == [1, 2]  # camera 0 of set 1 waits for camera 0 of set 0
        release.set()
        pool.wait(t0)
        pool.wait(t1)
        assert sorted(done1) == [0, 1, 2]
    finally:
        release.set()
        pool.close()


def test_waiting_callers_help_only_with_their_set_and_earlier_ones():
    pool = CameraPool(1)  # no worker: the waiting caller runs the items
    order = []
    t0 = pool.submit(lambda i: order.append((0, i)), 2)
    t1 = pool.submit(lambda i: order.append((1, i)), 2)
    pool.wait(t0)
    assert order == [(0, 0), (0, 1)]
    pool.wait(t1)
    assert order == [(0, 0), (0, 1), (1, 0), (1, 1)]
    pool.close()


@pytest.mark.parametrize("locality, want", [
    (1, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]),  # first in first out across lanes
    (3, [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]),  # a worker keeps a lane for 3 items in a row
    (2, [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]),
])
def test_locality_runs_a_lanes_queued_items_in_a_row(locality, want):
    pool = CameraPool(1)
    pool.locality = locality
    order, go = [], threading.Event()

    def make(k):
        def fn(i):
            if (k, i) == (0, 0):
                assert go.wait(30)  # every set is queued before the first item ends
            order.append((k, i))
        return fn

    try:
        pool.grow(1)
        tickets = [pool.submit(make(k), 2) for k in range(3)]
        go.set()
        for t in tickets:
            pool.wait(t)
    finally:
        go.set()
        pool.close()
    assert order == want


@pytest.mark.parametrize("how", ["join", "wait"])
def test_a_waiter_wakes_when_its_set_settles_not_at_every_item(monkeypatch, how):
    # a frame set's waiter (not helping) checks its ticket once per wake-up: woken at every finished camera,
    # it checked 8 times or more
    pool = CameraPool(3)  # two workers
    main = threading.get_ident()
    checks = []
    settled = Ticket.settled

    def counting(self):
        if threading.get_ident() == main:
            checks.append(1)
        return settled(self)

    monkeypatch.setattr(Ticket, "settled", counting)
    try:
        gate = threading.Event()
        ticket = pool.submit(lambda i: gate.wait(5) and time.sleep(0.005), 8)
        starter = threading.Timer(0.05, gate.set)  # the items finish while the caller already waits
        starter.start()
        pool.join(ticket) if how == "join" else pool.wait(ticket)
        starter.join()
        assert ticket.done == 8
        assert len(checks) <= 3, len(checks)  # a check before waiting, one at settlement (one to spare)
    finally:
        pool.close()
