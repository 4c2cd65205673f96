"""One peer of signal_test.py: a small torch model trained as users write it, with a last
checkpoint in `finally` and (in `term` mode) a SIGTERM handler installed BEFORE `import grapevine`
as a preemption hook would be.

    signal_peer.py int|term

Each round it writes $GRAPEVINE_OUT/progress-<rank> (the round reached). On KeyboardInterrupt it
writes interrupted-<rank>; the SIGTERM handler writes preempted-<rank> and raises SystemExit; the
`finally` block always writes checkpoint-<rank>.pt (the optimizer's state_dict). Both leave the
`with` block by an exception, so the optimizer finalizes without averaging.
"""

import os
import signal
import sys
import time

mode = sys.argv[1]
out = os.environ["GRAPEVINE_OUT"]
rank = int(os.environ["GRAPEVINE_RANK"])


def mark(name, text=""):
    with open(os.path.join(out, f"{name}-{rank}"), "w") as f:
        f.write(str(text))


if mode == "term":
    def preempted(signum, frame):
        mark("preempted", signum)
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, preempted)  # before grapevine is imported

import torch  # noqa: E402

import grapevine.torch  # noqa: E402

torch.manual_seed(rank)
model = torch.nn.Linear(16, 4)
inputs, target = torch.randn(64, 16), torch.randn(64, 4)
opt = grapevine.torch.DecentralizedOptimizer(model.named_parameters(),
                                             torch.optim.SGD(model.parameters(), lr=0.01))
try:
    with opt:
        for t in range(opt.planned_rounds):
            opt.zero_grad()
            loss = ((model(inputs) - target) ** 2).mean()
            loss.backward()
            opt.step(loss=loss)
            mark("progress", t)
            time.sleep(0.01)
except KeyboardInterrupt:
    mark("interrupted", opt.stats().rounds)
    raise
finally:
    torch.save(opt.state_dict(), os.path.join(out, f"checkpoint-{rank}.pt"))
