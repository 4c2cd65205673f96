"""DecentralizedOptimizer behaves as a torch optimizer where torch users rely on it (#39 item 6):
it is a torch.optim.Optimizer (lr schedulers take it; param_groups have "lr"), a parameter whose
.grad is None is left alone by Grapevine's optimizer as torch leaves it, replacing a parameter's
.data after construction is refused instead of silently cutting it out of gossip, and the records
show the lr actually used. Two peers in two threads."""

import json
import os

import pytest

torch = pytest.importorskip("torch")

import grapevine  # noqa: E402
import grapevine.torch  # noqa: E402
from gv_testing import external_config, free_base_port, run_threads  # noqa: E402


def config(port_hint, rounds=4, **sections):
    c = external_config("torch-semantics", free_base_port(2, port_hint), 2, rounds, 0.1,
                        **sections)
    c["output"]["log_every"] = 1
    return c


def records_lr(c, rank):
    with open(os.path.join(c["output"]["dir"], f"peer-{rank}.jsonl")) as f:
        return [json.loads(line)["lr"] for line in f if '"final"' not in line]


class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.used = torch.nn.Parameter(torch.randn(4))
        self.unused = torch.nn.Parameter(torch.randn(4))  # not in the loss: .grad stays None

    def forward(self):
        return (self.used ** 2).sum()


@pytest.mark.parametrize("missing_grad", ["skip", "zero"])
def test_a_parameter_without_grad(missing_grad):
    """Grapevine's optimizer with momentum and weight decay: 'skip' (the default) leaves a
    parameter whose .grad is None exactly where it was, as torch.optim.SGD does; 'zero' treats it
    as a zero gradient, so weight decay moves it."""
    c = config(23700 if missing_grad == "skip" else 23720,
               optimizer={"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1})

    def peer(rank):
        model = Two()
        opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), None, config=c,
                                                     rank=rank, missing_grad=missing_grad)
        before = model.unused.detach().clone()
        used_before = model.used.detach().clone()
        with opt:
            for _ in range(opt.planned_rounds):
                opt.zero_grad(set_to_none=True)
                model().backward()
                opt.step()
        return before, model.unused.detach().clone(), used_before, model.used.detach().clone()

    for before, after, used_before, used_after in run_threads([lambda: peer(0),
                                                                lambda: peer(1)]):
        assert not torch.equal(used_before, used_after)
        if missing_grad == "skip":
            assert torch.equal(before, after)
        else:
            assert not torch.equal(before, after)


def test_is_a_torch_optimizer_and_schedulers_drive_the_lr():
    """optimizer=None: param_groups[0]['lr'] shows optimizer.*'s schedule until a torch
    scheduler sets it; from then on the scheduler's lr is used, and the records show it."""
    c = config(23740, rounds=6)

    def peer(rank):
        model = torch.nn.Linear(3, 1)
        opt = grapevine.torch.DecentralizedOptimizer(model.parameters(), None, config=c,
                                                     rank=rank)
        assert isinstance(opt, torch.optim.Optimizer)
        shown = [opt.param_groups[0]["lr"]]
        with opt:
            for t in range(opt.planned_rounds):
                if t == 3:
                    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 0.5 ** (k + 1))
                opt.zero_grad()
                model(torch.ones(2, 3)).sum().backward()
                opt.step()
                if t >= 3:
                    sched.step()
                shown.append(opt.param_groups[0]["lr"])
        return shown

    shown, _ = run_threads([lambda: peer(0), lambda: peer(1)])
    assert shown[:4] == [0.1] * 4  # the config's constant schedule
    for rank in range(2):
        # Rounds 0-2: the schedule; round 3 on: the scheduler's 0.1 * 0.5^(k+1), k = 0, 1, 2.
        assert records_lr(c, rank) == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.025, 0.0125])


def test_wrapped_optimizer_lr_is_recorded():
    """A StepLR on the wrapper changes the wrapped SGD's lr; the records show what it used."""
    c = config(23760, rounds=4)

    def peer(rank):
        model = torch.nn.Linear(3, 1)
        sgd = torch.optim.SGD(model.parameters(), lr=0.2)
        opt = grapevine.torch.DecentralizedOptimizer(model.parameters(), sgd, config=c, rank=rank)
        assert opt.param_groups is sgd.param_groups
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        with opt:
            for _ in range(opt.planned_rounds):
                opt.zero_grad()
                model(torch.ones(2, 3)).sum().backward()
                opt.step()
                sched.step()
        return sgd.param_groups[0]["lr"]

    assert run_threads([lambda: peer(0), lambda: peer(1)]) == [0.05, 0.05]
    for rank in range(2):
        assert records_lr(c, rank) == pytest.approx([0.2, 0.2, 0.1, 0.1])


def test_replaced_data_and_added_groups_are_refused():
    c = config(23780, rounds=2)

    def peer(rank):
        model = torch.nn.Linear(3, 1)
        opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), None, config=c,
                                                     rank=rank)
        with pytest.raises(grapevine.InvalidArgumentError, match="fixed"):
            opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
        with opt:
            for _ in range(opt.planned_rounds):
                opt.zero_grad()
                model(torch.ones(2, 3)).sum().backward()
                opt.step()
        return True

    assert run_threads([lambda: peer(0), lambda: peer(1)]) == [True, True]

    c = config(23800, rounds=2)

    def replaced(rank):
        model = torch.nn.Linear(3, 1)
        opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), None, config=c,
                                                     rank=rank)
        model.weight.data = model.weight.data.clone()  # e.g. what .to() / .half() do
        with pytest.raises(grapevine.InvalidArgumentError, match="'weight' no longer uses"):
            opt.step()
        opt.finalize(average=False)
        return True

    assert run_threads([lambda: replaced(0), lambda: replaced(1)]) == [True, True]


class BN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.lin = torch.nn.Linear(3, 4)
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.lin(x)).sum()


@pytest.mark.parametrize("policy", ["average", "local"])
def test_buffers(policy):
    """The model itself as params: its BatchNorm running statistics are mixed and averaged
    ('average', the default), so after finalize(average=True) every peer holds one model; 'local'
    leaves each peer's own. Buffers are never stepped: with weight decay and the same data on both
    peers, a running mean after a round is exactly what BatchNorm computed."""
    c = config(23820 if policy == "average" else 23840, rounds=3,
               optimizer={"lr": 0.5, "momentum": 0.9, "weight_decay": 1.0})

    def peer(rank):
        model = BN()
        # missing_grad "zero": a buffer is still not stepped (it takes no gradient at all).
        opt = grapevine.torch.DecentralizedOptimizer(model, None, config=c, rank=rank,
                                                     buffers=policy, missing_grad="zero")
        with opt:
            for t in range(opt.planned_rounds):
                g = torch.Generator().manual_seed(t if t == 0 else 100 * rank + t)
                opt.zero_grad()
                model(torch.randn(16, 3, generator=g)).backward()
                computed = model.bn.running_mean.detach().clone()
                opt.step()
                if t == 0:  # same data on both peers: mixing keeps the value
                    assert torch.equal(model.bn.running_mean, computed)
        return model.bn.running_mean.clone(), model.bn.running_var.clone(), opt.state_dict()

    (m0, v0, s0), (m1, v1, _) = run_threads([lambda: peer(0), lambda: peer(1)])
    if policy == "average":
        assert torch.equal(m0, m1) and torch.equal(v0, v1)
        assert "buffer.bn.running_mean" in s0["grapevine"]["names"]
    else:
        assert not torch.equal(m0, m1)
        assert "buffer.bn.running_mean" not in s0["grapevine"]["names"]


def test_bad_buffer_policies():
    model = BN()
    with pytest.raises(grapevine.InvalidArgumentError, match="no buffer 'bn.nope'"):
        grapevine.torch.DecentralizedOptimizer(model, config=config(23860), buffers=["bn.nope"])
    with pytest.raises(grapevine.InvalidArgumentError, match="int64"):
        grapevine.torch.DecentralizedOptimizer(model, config=config(23860),
                                               buffers=["bn.num_batches_tracked"])
    with pytest.raises(grapevine.InvalidArgumentError, match="'sometimes'"):
        grapevine.torch.DecentralizedOptimizer(model, config=config(23860), buffers="sometimes")


def test_grapevine_adamw_matches_torch():
    """optimizer.kind adamw (optimizer=None): the same parameters as torch.optim.AdamW on the same
    gradients (two peers on the same data: mixing equal models changes nothing), to float rounding;
    a parameter without a gradient is left alone by both."""
    c = config(23880, rounds=20, optimizer={"kind": "adamw", "lr": 0.01, "momentum": 0.9,
                                            "beta2": 0.99, "weight_decay": 0.1,
                                            "schedule": "constant"})

    def peer(rank):
        model = Two()
        opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), None, config=c,
                                                     rank=rank)
        with opt:
            for _ in range(opt.planned_rounds):
                opt.zero_grad(set_to_none=True)
                model().backward()
                opt.step()
        return model.used.detach().clone(), model.unused.detach().clone()

    reference = Two()
    adamw = torch.optim.AdamW(reference.parameters(), lr=0.01, betas=(0.9, 0.99), eps=1e-8,
                              weight_decay=0.1)
    for _ in range(20):
        adamw.zero_grad(set_to_none=True)
        reference().backward()
        adamw.step()
    for used, unused in run_threads([lambda: peer(0), lambda: peer(1)]):
        torch.testing.assert_close(used, reference.used.detach(), rtol=1e-5, atol=1e-6)
        assert torch.equal(unused, reference.unused.detach())  # never had a gradient
        assert not torch.equal(used, Two().used.detach())
