#!/usr/bin/python3
"""Fashion-MNIST CNN trained by gossip: one process per peer, started by `grapevine launch`.

    grapevine launch examples/pytorch/fashion_cnn.yaml -- /usr/bin/python3 examples/pytorch/train.py

`grapevine launch` sets GRAPEVINE_RANK, GRAPEVINE_WORLD_SIZE, GRAPEVINE_CONFIG and GRAPEVINE_OUT
for each process; DecentralizedOptimizer reads them. To train your own model, replace Net (any
nn.Module of float32 CPU parameters) and the data; the rest stays.

Options: --data DIR (default /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist),
--eval-samples N (test images used for the accuracy, default all 10000).
"""

import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn.functional as F

import grapevine.torch


class Net(torch.nn.Module):
    """A small CNN: 2 conv layers, 1 hidden fully connected layer (~30 k parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = torch.nn.Linear(16 * 7 * 7, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def read_idx(path):
    """An idx file (the MNIST format), gzipped: a numpy array of its shape."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, rank, world):
    """This peer's iid shard of the training set and the test set, standardised."""
    train_x = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    train_y = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    test_x = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"))
    test_y = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"))
    mean, std = train_x.mean() / 255.0, train_x.std() / 255.0

    def images(x):
        return torch.from_numpy(((x.astype(np.float32) / 255.0 - mean) / std)[:, None])

    # Every peer draws the same permutation and keeps every world-th image: disjoint shards.
    mine = np.random.default_rng(0).permutation(len(train_y))[rank::world]
    return (images(train_x[mine]), torch.from_numpy(train_y[mine].astype(np.int64)),
            images(test_x), torch.from_numpy(test_y.astype(np.int64)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--eval-samples", type=int, default=10000)
    args = parser.parse_args()
    torch.set_num_threads(1)  # many peers share the machine's cores

    model = Net()
    # Grapevine's optimizer (optimizer.* in the config) steps from .grad; pass a torch optimizer
    # as the second argument to use yours instead. Connects to the neighbours; every peer then
    # starts from rank 0's weights.
    opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters())
    rank, world = opt.rank, opt.world_size
    train_x, train_y, test_x, test_y = load(args.data, rank, world)
    test_x, test_y = test_x[:args.eval_samples], test_y[:args.eval_samples]
    batch_size = 32
    batches = torch.Generator().manual_seed(rank)

    def evaluate():
        model.eval()
        with torch.no_grad():
            correct = sum((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
                          for i in range(0, len(test_y), 1000))
        model.train()
        return correct / len(test_y)

    with opt:  # finalize(average=True) on the way out: every peer ends with the average model
        for t in range(opt.planned_rounds):
            batch = torch.randint(0, len(train_y), (batch_size,), generator=batches)
            opt.zero_grad()
            loss = F.cross_entropy(model(train_x[batch]), train_y[batch])
            loss.backward()
            opt.step(loss=loss)  # Grapevine's optimizer step + one gossip round
            for event in opt.poll_events():
                print(f"peer {rank}: {event}", flush=True)
            if (t + 1) % 200 == 0 and t + 1 < opt.planned_rounds:
                opt.report(test_accuracy=evaluate())  # into this peer's records
        # The local model's accuracy goes into the final record and the run's summary.
        opt.report(test_accuracy=evaluate())
    print(f"peer {rank}: averaged model test accuracy {evaluate():.4f}", flush=True)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(opt.out_dir, "model.pt"))


if __name__ == "__main__":
    main()
