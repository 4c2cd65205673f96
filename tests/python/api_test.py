"""The Peer binding (grapevine.Peer over the C++ grapevine::Peer): errors become the documented
exception classes with the C++ message; tensors are zero-copy after bind(); blocking calls release
the GIL (two peers in two threads of one process would deadlock otherwise)."""

import os
import threading
import time

import numpy as np
import pytest

import grapevine
from gv_testing import external_config, free_base_port, run_threads, scratch


def config(base_port, peers=2, rounds=3, **sections):
    return external_config("api-test", base_port, peers, rounds, 0.5, **sections)


# ---- errors --------------------------------------------------------------------------------------

def test_exception_hierarchy():
    assert issubclass(grapevine.InvalidArgumentError, grapevine.GrapevineError)
    assert issubclass(grapevine.InvalidArgumentError, ValueError)
    assert issubclass(grapevine.NotFoundError, LookupError)
    assert issubclass(grapevine.FailedPreconditionError, RuntimeError)
    assert issubclass(grapevine.UnavailableError, ConnectionError)
    assert issubclass(grapevine.AbortedError, grapevine.GrapevineError)
    assert issubclass(grapevine.InternalError, RuntimeError)


def test_bad_config_is_invalid_argument_with_the_diagnostic():
    c = config(free_base_port(2, 23100))
    c["optimizer"]["lr"] = -1.0
    with pytest.raises(grapevine.InvalidArgumentError) as info:
        grapevine.Peer(c, rank=0)
    assert "optimizer.lr" in str(info.value)
    assert info.value.code_name == "invalid_argument"
    c = config(free_base_port(2, 23100))
    c["run"]["no_such_key"] = 1
    with pytest.raises(grapevine.InvalidArgumentError) as info:
        grapevine.Peer(c, rank=0)
    assert "no_such_key" in str(info.value)


def test_builtin_workload_is_refused():
    c = config(free_base_port(2, 23100), workload={"name": "consensus"})
    with pytest.raises(grapevine.InvalidArgumentError) as info:
        grapevine.Peer(c, rank=0)
    assert "external" in str(info.value)


def test_missing_config_file():
    path = os.path.join(scratch("api-missing"), "nope.yaml")
    with pytest.raises(grapevine.GrapevineError) as info:
        grapevine.Peer(path, rank=0)
    assert "nope.yaml" in str(info.value)


def test_no_config_at_all(monkeypatch):
    monkeypatch.delenv("GRAPEVINE_CONFIG", raising=False)
    with pytest.raises(grapevine.InvalidArgumentError, match="GRAPEVINE_CONFIG"):
        grapevine.Peer(rank=0)


def test_rank_out_of_range():
    c = config(free_base_port(2, 23100))
    with pytest.raises(grapevine.InvalidArgumentError) as info:
        grapevine.Peer(c, rank=2)
    assert "2" in str(info.value)
    with pytest.raises(grapevine.InvalidArgumentError):
        grapevine.Peer(c, rank=-3)


def test_rank_from_environment(monkeypatch):
    c = config(free_base_port(2, 23100))
    monkeypatch.setenv("GRAPEVINE_RANK", "1")
    assert grapevine.Peer(c).rank == 1
    monkeypatch.setenv("GRAPEVINE_RANK", "7")
    with pytest.raises(grapevine.InvalidArgumentError):
        grapevine.Peer(c)


def test_overrides_and_yaml_text():
    c = config(free_base_port(2, 23100))
    peer = grapevine.Peer(grapevine.to_yaml(c), rank=0, optimizer__lr=0.25,
                          overrides={"run.rounds": 7})
    assert peer.planned_rounds == 7
    assert "0.25" in peer.config_yaml
    assert peer.world_size == 2
    with pytest.raises(grapevine.InvalidArgumentError):
        grapevine.Peer(c, rank=0, overrides=["run.rounds"])


def test_tensor_errors():
    c = config(free_base_port(2, 23100))
    peer = grapevine.Peer(c, rank=0)
    with pytest.raises(grapevine.InvalidArgumentError, match="float32"):
        peer.add_tensor("w", np.zeros(4, dtype=np.float64))
    with pytest.raises(grapevine.InvalidArgumentError, match="contiguous"):
        peer.add_tensor("w", np.zeros((4, 4), dtype=np.float32)[:, 1])
    with pytest.raises(TypeError):
        peer.add_tensor("w", [0.0, 1.0])
    w = np.zeros(4, dtype=np.float32)
    peer.add_tensor("w", w)
    with pytest.raises(grapevine.InvalidArgumentError) as info:
        peer.add_tensor("w", np.zeros(3, dtype=np.float32))
    assert "w" in str(info.value)
    assert peer.parameter_count == 4
    with pytest.raises(grapevine.FailedPreconditionError):
        peer.step([np.ones(4, dtype=np.float32)])
    with pytest.raises(grapevine.GrapevineError):
        peer.bind("w")  # before start()


# ---- two peers in one process --------------------------------------------------------------------

def test_two_peers_step_mix_bind_finalize():
    out = scratch("api-two-peers")
    c = config(free_base_port(2, 23140), rounds=2)
    grads = [np.array([1.0, 2.0, 3.0], dtype=np.float32),
             np.array([3.0, -2.0, 1.0], dtype=np.float32)]

    def peer_main(rank):
        w = np.full(3, 10.0 * (rank + 1), dtype=np.float32)  # rank 1's values are replaced
        b = np.full((2, 2), 1.0 + rank, dtype=np.float32)
        with grapevine.Peer(c, rank=rank, out_dir=os.path.join(out, f"r{rank}")) as peer:
            peer.add_tensor("w", w)
            peer.add_tensor("b", b.reshape(-1))
            peer.start()
            started = (w.copy(), b.copy())
            wv = peer.bind("w")
            bv = peer.bind("b").reshape(2, 2)
            assert wv.dtype == np.float32 and wv.shape == (3,)
            assert np.array_equal(wv, started[0])
            peer.step([grads[rank], None], loss=1.0 + rank)  # Grapevine's SGD, then a mix
            after_step = (wv.copy(), bv.copy(), w.copy())
            peer.start_mix(loss=0.5)  # no step: the caller's optimizer did nothing
            peer.wait()
            stats = peer.stats()
            peer.report(test_accuracy=0.5 + rank)
            events = peer.poll_events()
        return started, after_step, stats, events, wv.copy()

    results = run_threads([lambda: peer_main(0), lambda: peer_main(1)])
    for rank, (started, after_step, stats, events, final) in enumerate(results):
        # start(): every peer holds the lowest rank's values.
        assert np.array_equal(started[0], np.full(3, 10.0, dtype=np.float32))
        assert np.array_equal(started[1], np.full((2, 2), 1.0, dtype=np.float32))
        # x_i - lr g_i, then mixed with weights 1/2: 10 - 0.5 * (g_0 + g_1) / 2.
        expected = np.float32(10.0) - np.float32(0.5) * (grads[0] + grads[1]) / 2
        np.testing.assert_allclose(after_step[0], expected, rtol=1e-6)
        np.testing.assert_array_equal(after_step[1], np.full((2, 2), 1.0))  # zero gradient
        # Zero-copy: the round wrote into the bound buffer, not into the registered array.
        np.testing.assert_array_equal(after_step[2], started[0])
        assert stats.rounds == 2
        assert stats.neighbours == 1 and stats.live_neighbours == 1
        assert stats.as_dict()["rounds"] == 2
        assert events == []
    np.testing.assert_array_equal(results[0][4], results[1][4])


def test_a_neighbour_that_starts_its_rounds_late_is_not_suspect():
    # Issue 38: at 100M parameters four peers on 2 cores began their rounds seconds apart, and the
    # first round counted the late one suspect. A neighbour that is alive (heartbeats) and has sent
    # no round message yet is still starting: the first round waits for it (up to
    # peers.connect_timeout), whatever algorithm.round_timeout says. Later rounds keep the deadline.
    out = scratch("api-late-start")
    c = config(free_base_port(2, 23180), rounds=2, algorithm={"round_timeout": 0.3})

    def peer_main(rank):
        w = np.zeros(3, dtype=np.float32)
        with grapevine.Peer(c, rank=rank, out_dir=os.path.join(out, f"r{rank}")) as peer:
            peer.add_tensor("w", w)
            peer.start()
            if rank == 1:
                time.sleep(1.5)  # five round_timeouts before its first round
            for _ in range(2):
                peer.step([np.ones(3, dtype=np.float32)], loss=1.0)
            return peer.stats()

    stats = run_threads([lambda: peer_main(0), lambda: peer_main(1)])
    assert [s.suspect_rounds for s in stats] == [0, 0]
    assert [s.rounds for s in stats] == [2, 2]


def test_finalize_average_with_robust_mixing_keeps_each_peers_model():
    """algorithm.robust: finalize(average=True) keeps each peer's own model (an exact average would
    sum a hostile or quarantined member's model too); run.final_average is refused by validate."""
    out = scratch("api-robust-finalize")
    c = config(free_base_port(4, 23230), peers=4, rounds=1,
               algorithm={"name": "dsgd", "round_timeout": 60, "robust": "clip"})

    def peer_main(rank):
        w = np.zeros(3, dtype=np.float32)
        with grapevine.Peer(c, rank=rank, out_dir=os.path.join(out, f"r{rank}")) as peer:
            peer.add_tensor("w", w)
            peer.start()
            wv = peer.bind("w")
            peer.step([np.full(3, float(rank), dtype=np.float32)])
            mixed = wv.copy()
            peer.finalize(average=True)
            return mixed, wv.copy()

    results = run_threads([lambda r=r: peer_main(r) for r in range(4)])
    for mixed, final in results:
        np.testing.assert_array_equal(final, mixed)
    assert len({tuple(final) for _, final in results}) > 1  # not averaged
    c["run"]["final_average"] = True
    with pytest.raises(grapevine.InvalidArgumentError, match="run.final_average"):
        grapevine.Peer(c, rank=0)


def test_outer_optimizer_through_mix_steps_from_the_anchor():
    """outer.optimizer with the caller's own steps (mix()): the outer step starts from the model the
    last round ended with (the anchor), not from the parameters the caller moved; a buffer keeps
    its mixed value; state() carries the outer momentum and the anchor, and load_state() restores
    them. Every value below is exact in float (halves and quarters)."""
    out = scratch("api-outer")
    c = config(free_base_port(2, 23190), rounds=2,
               outer={"optimizer": "nesterov", "lr": 0.5, "momentum": 0.5})

    def peer_main(rank):
        w = np.full(2, 10.0, dtype=np.float32)
        stat = np.zeros(1, dtype=np.float32)
        with grapevine.Peer(c, rank=rank, out_dir=os.path.join(out, f"r{rank}")) as peer:
            peer.add_tensor("w", w)
            peer.add_buffer("stat", stat)
            peer.start()
            wv, sv = peer.bind("w"), peer.bind("stat")
            seen = []
            for _ in range(2):
                wv -= 1.0 + 2.0 * rank  # the caller's own step: 1 at rank 0, 3 at rank 1
                sv[:] = 1.0 + 2.0 * rank  # a running statistic
                peer.mix(loss=1.0)
                seen.append((wv.copy(), sv.copy()))
            state = peer.state()
            # load_state() checks names and order before it changes anything.
            bad = dict(reversed(list(state.items())))
            with pytest.raises(grapevine.InvalidArgumentError, match="outer_momentum"):
                peer.load_state(bad)
            peer.load_state(state)
            again = peer.state()
        return seen, state, again

    results = run_threads([lambda: peer_main(0), lambda: peer_main(1)])
    for seen, state, again in results:
        # Round 0: x_half 9 and 7, mixed 8; d = 10 - 8 = 2, m = 2, x = 10 - 0.5 (2 + 0.5 * 2) = 8.5.
        np.testing.assert_array_equal(seen[0][0], np.full(2, 8.5, dtype=np.float32))
        # Round 1: x_half 7.5 and 5.5, mixed 6.5; d = 2, m = 3, x = 8.5 - 0.5 (2 + 1.5) = 6.75.
        np.testing.assert_array_equal(seen[1][0], np.full(2, 6.75, dtype=np.float32))
        # The buffer is mixed (1 and 3: 2), never outer-stepped.
        np.testing.assert_array_equal(seen[1][1], np.full(1, 2.0, dtype=np.float32))
        assert list(state) == ["outer_momentum", "outer_anchor"]
        np.testing.assert_array_equal(state["outer_momentum"], np.array([3, 3, 0], np.float32))
        np.testing.assert_array_equal(state["outer_anchor"], np.array([6.75, 6.75, 2], np.float32))
        assert list(again) == list(state)
        for name in state:
            np.testing.assert_array_equal(again[name], state[name])


def test_concurrent_calls_on_one_peer_are_refused():
    c = config(free_base_port(2, 23180), peers=2)
    peer = grapevine.Peer(c, rank=0)
    peer.add_tensor("w", np.zeros(2, dtype=np.float32))
    errors = []

    def blocking_start():
        try:
            peer.start()  # blocks until rank 1 is there
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    t = threading.Thread(target=blocking_start)
    t.start()
    # Polls until the other thread is inside start() (with the GIL released): the progress waited
    # on is that refusal; the thread cannot leave start() before rank 1 exists.
    refused = None
    while refused is None and t.is_alive():
        try:
            peer.stats()
        except grapevine.FailedPreconditionError as e:
            refused = e
        threading.Event().wait(0.01)
    other = grapevine.Peer(c, rank=1)
    other.add_tensor("w", np.zeros(2, dtype=np.float32))
    other.start()
    t.join(timeout=120)
    assert not t.is_alive() and errors == []
    assert refused is not None and "thread" in str(refused)
    run_threads([lambda: peer.finalize(average=False), lambda: other.finalize(average=False)])
