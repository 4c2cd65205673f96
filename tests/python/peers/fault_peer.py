"""One peer of fault_test.py: a small torch model trained with a caller-owned SGD.

    fault_peer.py VICTIM_RANK STOP_ROUND [kill|pause]

kill (default): the victim stops at STOP_ROUND (writes $GRAPEVINE_OUT/victim-waiting, then sleeps
until the test SIGKILLs it); every other peer goes on.
pause: the victim writes the same file and waits for $GRAPEVINE_OUT/go (the test SIGSTOPs it
meanwhile, past peers.dead_after, then SIGCONTs it); a peer told a neighbour is DEAD writes
$GRAPEVINE_OUT/saw-dead-<rank> and waits for the same go file, so the victim comes back while every
peer still has rounds to run.
Every peer that finishes collects its events, finalizes with averaging and writes
$GRAPEVINE_OUT/result-<rank>.json (events, rounds, final parameters).
"""

import json
import os
import sys
import time

import torch

import grapevine.torch

victim, stop_round = int(sys.argv[1]), int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "kill"
rank = int(os.environ["GRAPEVINE_RANK"])
torch.manual_seed(rank)
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
target = torch.randn(32, 1)
inputs = torch.randn(32, 8)
opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(),
                                             torch.optim.SGD(model.parameters(), lr=0.05))


def mark(name, t):
    with open(os.path.join(opt.out_dir, name), "w") as f:
        f.write(str(t))


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
        mark("victim-waiting", t)
        if mode == "pause":
            wait_for_go()
        else:
            while True:
                time.sleep(1)  # the test SIGKILLs this process here
    opt.zero_grad()
    loss = ((model(inputs) - target) ** 2).mean()
    loss.backward()
    opt.step(loss=loss)
    new = record(opt.poll_events())
    events += new
    if mode == "pause" and not waited and any(e["kind"] == "DEAD" for e in new):
        waited = True
        mark(f"saw-dead-{rank}", t)
        wait_for_go()
rounds = opt.stats().rounds
opt.finalize(average=True)
events += record(opt.poll_events())
params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
with open(os.path.join(opt.out_dir, f"result-{rank}.json"), "w") as f:
    json.dump({"rank": rank, "events": events, "rounds": rounds, "params": params}, f)
