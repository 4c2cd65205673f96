"""examples/gpt through `grapevine launch ... -- python3 examples/gpt/train.py`, shrunk (2 peers,
a 2-layer model, 80 rounds): the byte-level GPT learns dictionary text (held-out loss from ln 256 =
5.55 to below 3.4), the peers' models agree (CHOCO's local consensus distance: 2.7e-6 with gossip,
6.9e-3 with algorithm.consensus_step 0, measured at round 60), finalize averages them, the
summary aggregates the reported test loss, and `grapevine plot RUN_DIR` plots the run."""

import json
import os
import re
import subprocess

import pytest

pytest.importorskip("torch")

from gv_testing import (GCIDE_TEXT, PYTHON, SOURCE, free_base_port, grapevine_bin,  # noqa: E402
                        scratch)

EXAMPLE = os.path.join(SOURCE, "examples", "gpt")
PEERS = 2
ROUNDS = 80


def test_gpt_example():
    if not os.path.exists(GCIDE_TEXT):
        pytest.skip("dict-gcide is not installed (tools/install-deps)")
    d = scratch("example-gpt")
    with open(os.path.join(EXAMPLE, "gpt.yaml")) as f:
        text = f.read()
    for pattern, value in ((r"count: 4", f"count: {PEERS}"), (r"rounds: \d+", f"rounds: {ROUNDS}"),
                           (r"base_port: \d+", f"base_port: {free_base_port(PEERS, 25100)}"),
                           (r"dir: runs/gpt-gcide", f"dir: {d}/out")):
        text, n = re.subn(pattern, value, text)
        assert n == 1, pattern
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(text)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([grapevine_bin(), "launch", config, "--", PYTHON,
                        os.path.join(EXAMPLE, "train.py"), "--layers", "2", "--dim", "64",
                        "--context", "64", "--warmup", "10", "--eval-every", "20",
                        "--text-mb", "4"], env=env, capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stdout + r.stderr
    out = os.path.join(d, "out")
    own, averaged = [], set()
    for rank in range(PEERS):
        with open(os.path.join(out, f"peer-{rank}.log")) as f:
            log = f.read()
        m = re.search(r"validation loss (\d+\.\d+) \(own model\), (\d+\.\d+) \(averaged", log)
        assert m, log
        own.append(float(m.group(1)))
        averaged.add(m.group(2))
        with open(os.path.join(out, f"peer-{rank}.jsonl")) as f:
            distances = [json.loads(x)["local_consensus_distance"] for x in f
                         if "local_consensus_distance" in x]
        assert distances and distances[-1] < 1e-3, distances[-3:]
    assert max(own) < 3.4, own
    assert len(averaged) == 1  # finalize(average=True): one model
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    assert summary["peers_finished"] == PEERS
    assert summary["test_loss_max"] < 3.4
    assert "test loss (mean/min/max)" in r.stdout
    # `grapevine plot` of the run: loss and the reported test loss, one line per peer.
    p = subprocess.run([grapevine_bin(), "plot", out], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("loss_vs_rounds.png", "test_loss_vs_rounds.png", "test_loss_vs_bytes.png"):
        path = os.path.join(out, "plots", name)
        assert os.path.getsize(path) > 1000, path
    with open(os.path.join(out, "plots", "data", "peer-1.dat")) as f:
        assert len(f.read().splitlines()) > 8  # the header and the records
