"""bfloat16 and float16 parameters (#39 item 3): each keeps its dtype and storage; Grapevine holds
an fp32 master copy, mixes in fp32 and rounds once per round. Two peers in two threads."""

import pytest

torch = pytest.importorskip("torch")

import grapevine.torch  # noqa: E402
from gv_testing import external_config, free_base_port, run_threads  # noqa: E402


def config(port_hint, rounds, **sections):
    return external_config("precision", free_base_port(2, port_hint), 2, rounds, 0.1, **sections)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mixing_in_fp32_rounds_once(dtype):
    """With a torch optimizer: after each round both peers hold round((a + b) / 2) of their
    stepped values a and b, computed in fp32 (D-PSGD, 2 peers, weights 1/2)."""
    c = config(23900 if dtype == torch.bfloat16 else 23920, rounds=5)

    def peer(rank):
        torch.manual_seed(rank)  # different starts: rank 0's are adopted, then data differ
        model = torch.nn.Linear(8, 3).to(dtype)
        sgd = torch.optim.SGD(model.parameters(), lr=0.05)
        opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), sgd, config=c,
                                                     rank=rank)
        trace = []
        with opt:
            for t in range(opt.planned_rounds):
                g = torch.Generator().manual_seed(10 * rank + t)
                x = torch.randn(16, 8, generator=g)
                opt.zero_grad()
                # (CPU torch has no float16 matmul: the forward runs in fp32, the gradients
                # come back in the parameters' dtype.)
                out = x @ model.weight.float().t() + model.bias.float()
                out.pow(2).mean().backward()
                opt.start_step()
                stepped = model.weight.detach().clone()  # before mixing
                opt.wait()
                trace.append((stepped, model.weight.detach().clone()))
        assert model.weight.dtype == dtype and model.bias.dtype == dtype
        return trace, model.weight.detach().clone()

    (t0, w0), (t1, w1) = run_threads([lambda: peer(0), lambda: peer(1)])
    moved = False
    for (a, mixed0), (b, mixed1) in zip(t0, t1):
        expected = ((a.float() + b.float()) * 0.5).to(dtype)
        assert torch.equal(mixed0, expected) and torch.equal(mixed1, expected)
        moved = moved or not torch.equal(a, b)
    assert moved  # the peers' steps differed, so mixing did something
    assert torch.equal(w0, w1)  # finalize(average=True)


def test_grapevine_optimizer_keeps_fp32_master_weights():
    """optimizer=None on bfloat16 parameters: steps far below bfloat16's resolution accumulate in
    the fp32 master (100 steps of 1e-4 on 1.0 move it by 0.01, about one bfloat16 ulp at 1.0:
    plain bfloat16 SGD would never move, each update rounding away)."""
    c = config(23940, rounds=100, optimizer={"lr": 1e-4})

    def peer(rank):
        w = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
        opt = grapevine.torch.DecentralizedOptimizer([("w", w)], None, config=c, rank=rank)
        with opt:
            for _ in range(opt.planned_rounds):
                opt.zero_grad()
                w.float().sum().backward()  # gradient 1 everywhere
                opt.step()
        return w.detach().clone()

    for w in run_threads([lambda: peer(0), lambda: peer(1)]):
        assert w.dtype == torch.bfloat16
        assert torch.equal(w, torch.full((4,), 0.99, dtype=torch.float32).to(torch.bfloat16))
        assert not torch.equal(w, torch.ones(4, dtype=torch.bfloat16))
    # What plain bfloat16 arithmetic would do: nothing.
    plain = torch.ones(4, dtype=torch.bfloat16)
    for _ in range(100):
        plain = plain - torch.tensor(1e-4, dtype=torch.bfloat16) * torch.ones(4, dtype=torch.bfloat16)
    assert torch.equal(plain, torch.ones(4, dtype=torch.bfloat16))


def test_load_state_dict_sets_the_master():
    """load_state_dict on bfloat16 parameters under Grapevine's optimizer: the fp32 master takes
    the loaded values (the next step starts from them, not from the values before loading)."""
    c = config(23960, rounds=4, optimizer={"lr": 0.0})  # lr 0: steps change nothing

    def peer(rank):
        w = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
        opt = grapevine.torch.DecentralizedOptimizer([("w", w)], None, config=c, rank=rank)
        with opt:
            opt.zero_grad()
            w.float().sum().backward()
            opt.step()
            state = opt.state_dict()
            state["grapevine"]["params"][0] = torch.full((4,), 2.0, dtype=torch.bfloat16)
            opt.load_state_dict(state)
            for _ in range(opt.planned_rounds - 1):
                opt.zero_grad()
                w.float().sum().backward()
                opt.step()
        return w.detach().clone()

    for w in run_threads([lambda: peer(0), lambda: peer(1)]):
        assert torch.equal(w, torch.full((4,), 2.0, dtype=torch.bfloat16))
