"""examples/pytorch runs: train.py with the example's config, shrunk to 2 peers and a few rounds,
trains (its loss goes down), reports its accuracy into the records and ends with every peer
holding the same averaged model."""

import json
import os
import re
import subprocess

import pytest

pytest.importorskip("torch")

from gv_testing import (SOURCE, Peers, free_base_port, grapevine_bin,  # noqa: E402
                        load_fashion_mnist, scratch)

EXAMPLE = os.path.join(SOURCE, "examples", "pytorch")
PEERS = 2
ROUNDS = 60


def assert_mixed(records):
    """The accuracy bar passes without gossip (each peer alone reaches it); the peer's distance to
    its neighbours' public copies (CHOCO's local consensus distance, logged every 10 rounds) does
    not. Measured at round 59: 1.3e-5 with gossip; 0.12-0.14 with algorithm.consensus_step 0."""
    distances = [x["local_consensus_distance"] for x in records if "local_consensus_distance" in x]
    assert distances, "no local_consensus_distance in the records"
    assert distances[-1] < 1e-3


def test_pytorch_example():
    if load_fashion_mnist() is None:
        pytest.skip("dataset-fashion-mnist is not installed (tools/install-deps)")
    d = scratch("example-pytorch")
    with open(os.path.join(EXAMPLE, "fashion_cnn.yaml")) as f:
        text = f.read()
    # The example's own config, with fewer peers and rounds, a free port and this test's folder.
    text, n = re.subn(r"count: 8", f"count: {PEERS}", text)
    assert n == 1
    text, n = re.subn(r"rounds: \d+", f"rounds: {ROUNDS}", text)
    assert n == 1
    text, n = re.subn(r"base_port: \d+", f"base_port: {free_base_port(PEERS, 23600)}", text)
    assert n == 1
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(text)
    peers = Peers(PEERS, os.path.join(EXAMPLE, "train.py"), ["--eval-samples", "1000"], config, d)
    codes = peers.wait(timeout=500)
    if codes != [0] * PEERS:
        peers.dump_logs()
    assert codes == [0] * PEERS
    averaged = set()
    for r in range(PEERS):
        log = peers.log(r)
        m = re.search(r"averaged model test accuracy (\d\.\d+)", log)
        assert m, log
        averaged.add(m.group(1))
        with open(os.path.join(d, f"peer-{r}.final.json")) as f:
            final = json.load(f)
        assert final["rounds"] == ROUNDS
        assert 0.5 < final["test_accuracy"] <= 1.0  # chance is 0.1; about 0.7 after 60 rounds
        records = [json.loads(line) for line in open(os.path.join(d, f"peer-{r}.jsonl"))]
        losses = [x["loss"] for x in records if "loss" in x and x["loss"] is not None]
        assert losses[-1] < losses[0]
        assert_mixed(records)
    assert len(averaged) == 1  # every peer holds the same averaged model
    assert os.path.exists(os.path.join(d, "model.pt"))


def launch_runs_commands():
    help_text = subprocess.run([grapevine_bin(), "launch", "--help"], capture_output=True,
                               text=True).stdout
    return "-- COMMAND" in help_text


def test_pytorch_example_through_launch():
    """The README's line, `grapevine launch CONFIG -- /usr/bin/python3 train.py`, shrunk with --set:
    the summary holds every peer and the accuracy the peers reported."""
    if load_fashion_mnist() is None:
        pytest.skip("dataset-fashion-mnist is not installed (tools/install-deps)")
    if not launch_runs_commands():
        pytest.skip("this grapevine launch has no `-- COMMAND` (not built yet)")
    d = scratch("example-pytorch-launch")
    cmd = [grapevine_bin(), "launch", os.path.join(EXAMPLE, "fashion_cnn.yaml"),
           "--set", f"peers.count={PEERS}", "--set", f"run.rounds={ROUNDS}",
           "--set", f"peers.base_port={free_base_port(PEERS, 23650)}", "--out", d, "--quiet",
           "--", "/usr/bin/python3", os.path.join(EXAMPLE, "train.py"), "--eval-samples", "1000"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-4000:])
    assert result.returncode == 0
    with open(os.path.join(d, "summary.json")) as f:
        summary = json.load(f)
    assert summary["peers_finished"] == PEERS
    assert 0.5 < summary["test_accuracy_mean"] <= 1.0
    for r in range(PEERS):
        assert_mixed([json.loads(line) for line in open(os.path.join(d, f"peer-{r}.jsonl"))])
    assert os.path.exists(os.path.join(d, "model.pt"))
