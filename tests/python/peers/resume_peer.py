"""One peer of resume_test.py: a small model on data that depends only on (rank, round), so an
interrupted and resumed run can be compared bit for bit with an undisturbed one.

    resume_peer.py adamw|own [die:<round>]

adamw: torch.optim.AdamW steps, Grapevine mixes; own: Grapevine's optimizer (momentum, cosine lr).
die:<round>: the process exits (status 1, nothing flushed) right after that round's step. A peer
started with GRAPEVINE_RESUME=1 continues from the checkpoints: its loop starts at
opt.start_round. At the end: finalize(average=True), then $GRAPEVINE_OUT/result-<rank>.json.
"""

import json
import os
import sys

import torch

import grapevine.torch

kind = sys.argv[1]
die = int(sys.argv[2].split(":")[1]) if len(sys.argv) > 2 else -1
rank = int(os.environ["GRAPEVINE_RANK"])
torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
inner = torch.optim.AdamW(model.parameters(), lr=0.01) if kind == "adamw" else None
opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(), inner)
start = opt.start_round
with opt:
    for t in range(opt.start_round, opt.planned_rounds):
        g = torch.Generator().manual_seed(1000 * rank + t)
        x = torch.randn(32, 16, generator=g)
        y = torch.randn(32, 4, generator=g)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step(loss=loss)
        if t == die:
            os._exit(1)
    resumed = opt.stats().resumed_from_round
params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
with open(os.path.join(opt.out_dir, f"result-{rank}.json"), "w") as f:
    json.dump({"start_round": start, "resumed_from_round": resumed, "params": params}, f)
