"""One peer of fault_test.py's pause case: a small torch model trained with a caller-owned SGD.
The victim writes $GRAPEVINE_OUT/victim-waiting at STOP_ROUND and waits for $GRAPEVINE_OUT/go (the
test SIGSTOPs it meanwhile, past peers.dead_after, then SIGCONTs it). A peer that is told a
neighbour is DEAD writes $GRAPEVINE_OUT/saw-dead-<rank> and waits for the same go file, so the
victim comes back while every peer still has rounds to run; everyone then finishes and finalizes
with averaging.

    pause_peer.py VICTIM_RANK STOP_ROUND
Writes $GRAPEVINE_OUT/result-<rank>.json (events, rounds, final parameters).
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


def wait_for_go():
    while not os.path.exists(os.path.join(opt.out_dir, "go")):
        time.sleep(0.05)


def record(new):
    return [{"kind": e.kind.name, "peer": e.peer, "round": e.round, "message": e.message}
            for e in new]


events = []
waited = False
for t in range(opt.planned_rounds):
    if rank == victim and t == stop_round:
        with open(os.path.join(opt.out_dir, "victim-waiting"), "w") as f:
            f.write(str(t))
        wait_for_go()
    opt.zero_grad()
    loss = ((model(inputs) - target) ** 2).mean()
    loss.backward()
    opt.step(loss=loss)
    new = record(opt.poll_events())
    events += new
    if not waited and any(e["kind"] == "DEAD" for e in new):
        waited = True
        with open(os.path.join(opt.out_dir, f"saw-dead-{rank}"), "w") as f:
            f.write(str(t))
        wait_for_go()
rounds = opt.stats().rounds
opt.finalize(average=True)
events += record(opt.poll_events())
params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
with open(os.path.join(opt.out_dir, f"result-{rank}.json"), "w") as f:
    json.dump({"rank": rank, "events": events, "rounds": rounds, "params": params}, f)
