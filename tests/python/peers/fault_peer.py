"""One peer of fault_test.py: a small torch model trained with a caller-owned SGD; the victim
rank stops after a few rounds (writes $GRAPEVINE_OUT/victim-waiting, then sleeps until the test
SIGKILLs it); every other peer goes on, collects its events and finalizes with averaging.

    fault_peer.py VICTIM_RANK STOP_ROUND
Writes $GRAPEVINE_OUT/result-<rank>.json (events, rounds, final parameters) for the survivors.
"""

import json
import os
import sys
import time

import torch

import grapevine.torch

victim, stop_round = int(sys.argv[1]), int(sys.argv[2])
rank = int(os.environ["GRAPEVINE_RANK"])
torch.manual_seed(rank)
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
target = torch.randn(32, 1)
inputs = torch.randn(32, 8)
opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(),
                                             torch.optim.SGD(model.parameters(), lr=0.05))
events = []
for t in range(opt.planned_rounds):
    if rank == victim and t == stop_round:
        with open(os.path.join(opt.out_dir, "victim-waiting"), "w") as f:
            f.write(str(t))
        while True:
            time.sleep(1)  # the test SIGKILLs this process here
    opt.zero_grad()
    loss = ((model(inputs) - target) ** 2).mean()
    loss.backward()
    opt.step(loss=loss)
    events += [{"kind": e.kind.name, "peer": e.peer, "round": e.round, "message": e.message}
               for e in opt.poll_events()]
rounds = opt.stats().rounds
opt.finalize(average=True)
events += [{"kind": e.kind.name, "peer": e.peer, "round": e.round, "message": e.message}
           for e in opt.poll_events()]
params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
with open(os.path.join(opt.out_dir, f"result-{rank}.json"), "w") as f:
    json.dump({"rank": rank, "events": events, "rounds": rounds, "params": params}, f)
