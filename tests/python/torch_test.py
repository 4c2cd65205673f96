"""grapevine.torch.DecentralizedOptimizer in one process (two peers in two threads): which
parameters are registered, zero-copy, both ways to step, overlap, state_dict, finalize, and the
errors a wrong model gets."""

import threading

import pytest

torch = pytest.importorskip("torch")

import grapevine  # noqa: E402
import grapevine.torch  # noqa: E402
from gv_testing import external_config, free_base_port, run_threads  # noqa: E402


def config(base_port, rounds=4, **sections):
    return external_config("torch-test", base_port, 2, rounds, 0.1, **sections)


# torch's default generator is one per process: peers built in threads at once would draw from it
# in turn (each rank's weights then depend on the interleaving: seen as rank 0 and 1 with equal
# frozen layers).
_SEED_LOCK = threading.Lock()


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        with _SEED_LOCK:
            torch.manual_seed(seed)
            self.frozen = torch.nn.Linear(3, 4)
            self.body = torch.nn.Linear(4, 2)
        self.frozen.requires_grad_(False)
        self.scale = torch.nn.Parameter(torch.eye(2).add(0.5).t())  # non-contiguous (a transpose)

    def forward(self, x):
        return self.body(torch.relu(self.frozen(x))) @ self.scale


def inputs(rank):
    g = torch.Generator().manual_seed(10 + rank)
    return torch.randn(8, 3, generator=g), torch.randn(8, 2, generator=g)


# ---- errors (before any connection) ------------------------------------------------------------

def test_refuses_non_fp32():
    model = torch.nn.Linear(3, 2).double()
    with pytest.raises(grapevine.InvalidArgumentError, match="float32"):
        grapevine.torch.DecentralizedOptimizer(model.named_parameters(), config=config(1))


def test_refuses_non_cpu():
    p = torch.nn.Parameter(torch.empty(3, device="meta"))
    with pytest.raises(grapevine.InvalidArgumentError, match="meta"):
        grapevine.torch.DecentralizedOptimizer([p], config=config(1))


def test_refuses_a_parameter_twice():
    model = torch.nn.Linear(3, 2)
    params = list(model.parameters()) + [model.weight]
    with pytest.raises(grapevine.InvalidArgumentError, match="twice"):
        grapevine.torch.DecentralizedOptimizer(params, config=config(1))


def test_refuses_no_trainable_parameters():
    model = torch.nn.Linear(3, 2).requires_grad_(False)
    with pytest.raises(grapevine.InvalidArgumentError, match="trainable"):
        grapevine.torch.DecentralizedOptimizer(model.parameters(), config=config(1))


def test_refuses_bad_config_and_rank():
    model = torch.nn.Linear(3, 2)
    with pytest.raises(grapevine.InvalidArgumentError, match="optimizer.lr"):
        grapevine.torch.DecentralizedOptimizer(model.parameters(), config=config(1), rank=0,
                                               optimizer__lr=-3)
    with pytest.raises(grapevine.InvalidArgumentError):
        grapevine.torch.DecentralizedOptimizer(model.parameters(), config=config(1), rank=2)
    # Nothing was bound: the model still owns its storage and trains normally.
    model(torch.randn(1, 3)).sum().backward()


def test_override_names():
    assert grapevine.override_list({"optimizer__lr": 0.05, "run.rounds": 10,
                                    "topology__dims": [2, 3], "algorithm__overlap": True}) == [
        "optimizer.lr=0.05", "run.rounds=10", "topology.dims=[2, 3]", "algorithm.overlap=true"]
    assert grapevine.to_yaml({"run": {"rounds": 5}, "optimizer.lr": 0.1, "output": {"dir": "a b"}}) \
        == 'run: {rounds: 5}\noptimizer: {lr: 0.1}\noutput: {dir: "a b"}\n'


# ---- two peers -----------------------------------------------------------------------------------

TRAINABLE = ["scale", "body.weight", "body.bias"]  # named_parameters() order, frozen.* skipped


def trainable(model):
    return {name: p.detach().clone() for name, p in model.named_parameters() if name in TRAINABLE}


@pytest.mark.parametrize("owner", ["grapevine", "torch"])
def test_two_peers_train_and_average(owner):
    c = config(free_base_port(2, 23200 if owner == "grapevine" else 23220), rounds=4)

    def peer_main(rank):
        model = Net(seed=rank)
        frozen_before = model.frozen.weight.detach().clone()
        # References keep the original storages alive, so no new allocation can reuse them.
        originals = [p.data for p in (model.scale, model.body.weight, model.body.bias)]
        own = [t.data_ptr() for t in originals]
        sgd = torch.optim.SGD(model.parameters(), lr=0.1) if owner == "torch" else None
        opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), sgd, config=c,
                                                     rank=rank)
        names = list(opt._names)
        start = trainable(model)
        pointers = [p.data_ptr() for p in (model.scale, model.body.weight, model.body.bias)]
        # Bound: each parameter now lives in Grapevine's flat buffer, in registration order.
        assert all(a != b for a, b in zip(own, pointers))
        assert pointers[1] == pointers[0] + 4 * model.scale.numel()
        assert pointers[2] == pointers[1] + 4 * model.body.weight.numel()
        x, y = inputs(rank)
        trace = []
        for t in range(opt.planned_rounds):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            if t == 1:
                # start_step/wait splits the round (algorithm.overlap's shape).
                opt.start_step(loss=loss)
                opt.wait()
            else:
                opt.step(loss=loss)
            trace.append(trainable(model))
        # Zero-copy: the parameters' storage did not move during the rounds.
        same_storage = pointers == [p.data_ptr() for p in
                                    (model.scale, model.body.weight, model.body.bias)]
        state = opt.state_dict()
        opt.finalize(average=True)
        return names, start, frozen_before, same_storage, state, trace, trainable(model), model

    r0, r1 = run_threads([lambda: peer_main(0), lambda: peer_main(1)])
    # The frozen layer is not registered (and keeps each rank's own values).
    assert r0[0] == TRAINABLE
    assert not Net(0).scale.is_contiguous()
    assert not torch.equal(r0[2], r1[2])
    assert torch.equal(r0[7].frozen.weight, r0[2]) and torch.equal(r1[7].frozen.weight, r1[2])
    # After the constructor both hold rank 0's trainable values (rank 1's own differ).
    for name in TRAINABLE:
        assert torch.equal(r0[1][name], r1[1][name]), name
    assert not torch.equal(r1[1]["body.weight"], Net(1).body.weight.detach())
    assert r0[3] and r1[3]
    # D-PSGD with two peers: after each round both hold the same (mixed) values, and they move.
    for t in range(4):
        for name in TRAINABLE:
            torch.testing.assert_close(r0[5][t][name], r1[5][t][name], rtol=1e-6, atol=1e-7)
    assert not torch.equal(r0[5][3]["body.weight"], r0[1]["body.weight"])
    assert r0[4]["grapevine"]["rounds"] == 4
    assert (r0[4]["optimizer"] is None) == (owner == "grapevine")
    # finalize: identical, and the parameters own their storage again (trainable, writable).
    for name in TRAINABLE:
        assert torch.equal(r0[6][name], r1[6][name]), name
    model = r0[7]
    with torch.no_grad():
        model.scale.add_(1.0)
    model(torch.randn(1, 3)).sum().backward()


def test_state_dict_round_trip():
    c = config(free_base_port(2, 23240), rounds=2)

    def peer_main(rank):
        model = torch.nn.Linear(3, 2)
        sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), sgd, config=c,
                                                     rank=rank)
        x, y = inputs(rank)
        opt.zero_grad()
        ((model(x[:, :3]) - y) ** 2).mean().backward()
        opt.step()
        state = opt.state_dict()
        saved = [p.detach().clone() for p in model.parameters()]
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(7.0)
        opt.load_state_dict(state)
        restored = all(torch.equal(p, s) for p, s in zip(model.parameters(), saved))
        momentum = sgd.state_dict()["state"][0]["momentum_buffer"].clone()
        with pytest.raises(grapevine.InvalidArgumentError):
            opt.load_state_dict({"optimizer": None})
        opt.zero_grad()
        ((model(x[:, :3]) - y) ** 2).mean().backward()
        opt.step()
        opt.finalize(average=False)
        return restored, momentum, state

    r0, r1 = run_threads([lambda: peer_main(0), lambda: peer_main(1)])
    assert r0[0] and r1[0]
    assert torch.equal(r0[1], r0[2]["optimizer"]["state"][0]["momentum_buffer"])
    assert r0[2]["grapevine"]["names"] == ["weight", "bias"]
    assert r0[2]["grapevine"]["rounds"] == 1


def test_state_dict_restores_grapevine_state_exactly():
    """CHOCO + top-k with Grapevine's momentum: saving every peer's state_dict after round 3, taking
    a round with other gradients, and loading the state_dicts back continues exactly as a run
    without that round (the public copies, replicas and momentum are restored, not only the
    parameters)."""
    choco = {"algorithm": {"name": "choco", "consensus_step": 0.5, "round_timeout": 60},
             "compression": {"method": "top-k", "ratio": 0.5},
             "optimizer": {"lr": 0.1, "momentum": 0.9, "nesterov": True, "schedule": "constant"}}

    def run(port, rounds, detour):
        c = config(free_base_port(2, port), rounds=rounds, **choco)

        def peer_main(rank):
            model = torch.nn.Linear(3, 2)
            g = torch.Generator().manual_seed(0)  # not the global RNG: the two threads share it
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(torch.randn(p.shape, generator=g))
            opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), config=c,
                                                         rank=rank)
            x, y = inputs(rank)

            def round_(scale=1.0):
                opt.zero_grad()
                (scale * ((model(x) - y) ** 2).mean()).backward()
                opt.step()

            for _ in range(3):
                round_()
            state = opt.state_dict()
            if detour:
                round_(scale=-5.0)  # a round that moves everything somewhere else
                opt.load_state_dict(state)
            for _ in range(3):
                round_()
            final = [p.detach().clone() for p in model.parameters()]
            opt.finalize(average=False)
            return state, final

        return run_threads([lambda: peer_main(0), lambda: peer_main(1)])

    straight = run(23260, 6, detour=False)
    restored = run(23280, 7, detour=True)
    assert sorted(straight[0][0]["grapevine"]["state"]) == ["momentum", "public_copy",
                                                           "replica/1"]
    for rank in range(2):
        for a, b in zip(straight[rank][1], restored[rank][1]):
            assert torch.equal(a, b)
