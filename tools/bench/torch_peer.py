#!/usr/bin/python3
"""The time-to-accuracy benchmark's MLP written in PyTorch, trained through Grapevine's PyTorch API.

One process per peer, started by `grapevine launch CONFIG -- /usr/bin/python3 tools/bench/torch_peer.py`
(tools/bench/time-to-accuracy's `torch-choco-sign` system; the config has `workload: { name: external }`,
every other key as the built-in systems'). The model is the built-in fashion-mnist-mlp's: 784 ->
hidden... -> 10 with ReLU, the same initialisation (He-uniform hidden layers, Glorot-uniform output,
zero biases) and the same parameter layout, so the two differ in their compute kernels (PyTorch's
against Grapevine's) and in the draws of the initial weights and minibatches. The optimizer is
Grapevine's (optimizer.* of the config), as in the built-in systems.

Every --eval-every rounds (and after the last) each peer evaluates its own model on the test set and
saves its parameters (DIR/snapshots/peer-R-round-T.npy, float32, the layout of the built-in model) with
its clock paused, and appends {"round", "train_seconds", "test_accuracy"} to DIR/torch-peer-R.jsonl:
train_seconds is the wall time since the first round less those pauses, as the built-in records'.

    torch_peer.py --evaluate-snapshots DIR --hidden 1024,256
evaluates, for every round that all --peers peers saved, the exact average of their snapshots (the
deployable model) and prints one JSON line per round: {"round", "accuracy"}.

Options: --data DIR (default /usr/share/datasets/fashion-mnist), --batch N (per peer, default 64),
--hidden A,B,... (default 1024,256), --eval-every N (default 25), --seed S (initial weights, data split
and minibatches; default 1), --peers N (with --evaluate-snapshots).
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_baseline as ddp  # noqa: E402  (the data: the same loader, table and shards as DDP's)

DEFAULT_DATA = ddp.DEFAULT_DATA_DIR


class MLP(torch.nn.Module):
    def __init__(self, hidden, seed=0):
        super().__init__()
        sizes = [28 * 28] + list(hidden) + [10]
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for k, layer in enumerate(self.layers):
                fan_in, fan_out = layer.in_features, layer.out_features
                output = k == len(self.layers) - 1
                bound = math.sqrt(6.0 / (fan_in + fan_out)) if output else math.sqrt(6.0 / fan_in)
                layer.weight.uniform_(-bound, bound, generator=gen)
                layer.bias.zero_()

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


def load(data_dir):
    """Training and test sets ([n, 784] float32, labels), standardised with the training set's pixel
    mean and deviation: ddp_baseline.py's loader, the built-in workload's table."""
    train_x, train_y, test_x, test_y = ddp.load_fashion_mnist(data_dir)
    table = torch.from_numpy(ddp.pixel_table(train_x))

    def images(x):
        return table[torch.from_numpy(x.astype(np.int64))]

    return images(train_x), torch.from_numpy(train_y), images(test_x), torch.from_numpy(test_y)


def accuracy(model, test_x, test_y):
    model.eval()
    with torch.no_grad():
        correct = sum((model(test_x[i:i + 2000]).argmax(1) == test_y[i:i + 2000]).sum().item()
                      for i in range(0, len(test_y), 2000))
    model.train()
    return correct / len(test_y)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def load_flat(model, values):
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(torch.from_numpy(values[offset:offset + n]).reshape(p.shape))
            offset += n
    if offset != len(values):
        raise ValueError(f"a snapshot of {len(values)} values for a model of {offset}")


def train(args, hidden):
    import grapevine.torch

    torch.set_num_threads(1)  # the peers share the machine's cores
    model = MLP(hidden, args.seed)  # every peer then starts from rank 0's weights
    opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters())
    rank, world = opt.rank, opt.world_size
    train_x, train_y, test_x, test_y = load(args.data)
    # partition: iid, DDP's shards (the built-in workload's sizes).
    mine = torch.from_numpy(ddp.iid_partition(len(train_y), world, args.seed)[rank])
    train_x, train_y = train_x[mine], train_y[mine]
    batches = torch.Generator().manual_seed(1000 * args.seed + rank)
    snapshots = os.path.join(opt.out_dir, "snapshots")
    os.makedirs(snapshots, exist_ok=True)
    records = open(os.path.join(opt.out_dir, f"torch-peer-{rank}.jsonl"), "a")
    paused = 0.0
    start = 0.0

    def checkpoint(rounds):
        nonlocal paused
        t0 = time.perf_counter()
        train_s = t0 - start - paused
        acc = accuracy(model, test_x, test_y)
        path = os.path.join(snapshots, f"peer-{rank}-round-{rounds}.npy")
        np.save(path + ".tmp.npy", flat(model))
        os.replace(path + ".tmp.npy", path)
        records.write(json.dumps({"round": rounds, "train_seconds": train_s, "test_accuracy": acc}) + "\n")
        records.flush()
        paused += time.perf_counter() - t0

    def gradient():
        batch = torch.randint(0, len(train_y), (args.batch,), generator=batches)
        opt.zero_grad()
        loss = F.cross_entropy(model(train_x[batch]), train_y[batch])
        loss.backward()
        return loss

    with opt:
        start = time.perf_counter()
        loss = gradient()
        for t in range(opt.planned_rounds):
            # algorithm.overlap, as the built-in systems: the round's messages go out, the next
            # gradient is computed at the model before mixing while they travel, then the mix.
            opt.start_step(loss=loss)
            loss = gradient()
            opt.wait()
            if (t + 1) % args.eval_every == 0 or t + 1 == opt.planned_rounds:
                checkpoint(t + 1)
        opt.report(test_accuracy=accuracy(model, test_x, test_y))


def evaluate_snapshots(args, hidden):
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    _, _, test_x, test_y = load(args.data)
    model = MLP(hidden)
    rounds = {}
    for name in os.listdir(args.evaluate_snapshots):
        if name.startswith("peer-") and name.endswith(".npy") and "-round-" in name and ".tmp" not in name:
            rank, rnd = name[len("peer-"):-len(".npy")].split("-round-")
            rounds.setdefault(int(rnd), []).append(os.path.join(args.evaluate_snapshots, name))
    for rnd in sorted(rounds):
        paths = rounds[rnd]
        if len(paths) != args.peers:
            continue
        total = None
        for path in sorted(paths):
            v = np.load(path).astype(np.float64)
            total = v if total is None else total + v
        load_flat(model, (total / len(paths)).astype(np.float32))
        print(json.dumps({"round": rnd, "accuracy": accuracy(model, test_x, test_y)}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", default="1024,256")
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--evaluate-snapshots", metavar="DIR")
    ap.add_argument("--peers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1, help="initial weights, data split and minibatches")
    args = ap.parse_args()
    hidden = [int(h) for h in args.hidden.split(",") if h]
    if args.evaluate_snapshots:
        evaluate_snapshots(args, hidden)
    else:
        train(args, hidden)


if __name__ == "__main__":
    main()
