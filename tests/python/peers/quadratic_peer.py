"""One peer of exactness_test.py: the engine's quadratic workload written in torch.

f_i(x) = 1/2 |a_i x - b_i|^2 (runtime/train/workload.cc QuadraticWorkload), computed in float64 from
the fp32 parameters, the gradient rounded to fp32: the same arithmetic as the engine, so the same
model. Started with GRAPEVINE_RANK/GRAPEVINE_CONFIG/GRAPEVINE_OUT set, as `grapevine launch` does.

    quadratic_peer.py DATA.json grapevine|sgd
Writes $GRAPEVINE_OUT/x-<rank>.npy (the model after the last round) and avg-<rank>.npy (after
finalize(average=True)).
"""

import json
import os
import sys

import numpy as np
import torch

import grapevine.torch

data_path, mode = sys.argv[1], sys.argv[2]
with open(data_path) as f:
    data = json.load(f)
rank = int(os.environ["GRAPEVINE_RANK"])
a = torch.tensor(data["a"][rank], dtype=torch.float64)
b = torch.tensor(data["b"][rank], dtype=torch.float64)
x = torch.nn.Parameter(torch.zeros(len(data["b"][rank]), dtype=torch.float32))

sgd = torch.optim.SGD([x], lr=0.01) if mode == "sgd" else None
opt = grapevine.torch.DecentralizedOptimizer([("x", x)], sgd)
for _ in range(opt.planned_rounds):
    opt.zero_grad()
    loss = 0.5 * ((a * x.double() - b) ** 2).sum()
    loss.backward()
    opt.step(loss=loss)
out = opt.out_dir
np.save(os.path.join(out, f"x-{rank}.npy"), x.detach().numpy())
opt.finalize(average=True)
np.save(os.path.join(out, f"avg-{rank}.npy"), x.detach().numpy())
