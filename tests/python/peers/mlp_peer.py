"""One peer of fashion_mnist_test.py: a torch MLP on this peer's iid shard of Fashion-MNIST,
trained through DecentralizedOptimizer with Grapevine's optimizer (the config's optimizer.*).

    mlp_peer.py DATA.npz
DATA.npz holds train_x, train_y, test_x, test_y (standardised float32, int64; the test writes it
once). Writes $GRAPEVINE_OUT/result-<rank>.json: the local model's test accuracy before
finalize, the averaged model's after, the local parameters before finalize to
local-params-<rank>.npy and the final ones to params-<rank>.npy.
"""

import json
import os
import sys
import time

import numpy as np
import torch

import grapevine.torch

torch.set_num_threads(1)
started = time.monotonic()
rank = int(os.environ["GRAPEVINE_RANK"])
world = int(os.environ["GRAPEVINE_WORLD_SIZE"])
data = np.load(sys.argv[1])
perm = np.random.default_rng(1).permutation(len(data["train_y"]))
mine = perm[rank::world]
train_x = torch.from_numpy(data["train_x"][mine])
train_y = torch.from_numpy(data["train_y"][mine])
test_x = torch.from_numpy(data["test_x"])
test_y = torch.from_numpy(data["test_y"])

torch.manual_seed(rank)  # different on each rank: start() gives every peer rank 0's model
model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def accuracy():
    with torch.no_grad():
        return (model(test_x).argmax(1) == test_y).float().mean().item()


opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters())
batches = torch.Generator().manual_seed(100 + rank)
trained = time.monotonic()
for _ in range(opt.planned_rounds):
    batch = torch.randint(0, len(train_y), (64,), generator=batches)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(train_x[batch]), train_y[batch])
    loss.backward()
    opt.step(loss=loss)
train_seconds = time.monotonic() - trained
local = accuracy()
opt.report(test_accuracy=local)
events = [str(e) for e in opt.poll_events()]
# The local models before the exact average: the test measures how far gossip brought them together.
local_flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()
np.save(os.path.join(opt.out_dir, f"local-params-{rank}.npy"), local_flat)
opt.finalize(average=True)
averaged = accuracy()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
np.save(os.path.join(opt.out_dir, f"params-{rank}.npy"), flat)
with open(os.path.join(opt.out_dir, f"result-{rank}.json"), "w") as f:
    json.dump({"rank": rank, "local_accuracy": local, "averaged_accuracy": averaged,
               "events": events, "train_seconds": train_seconds,
               "total_seconds": time.monotonic() - started}, f)
