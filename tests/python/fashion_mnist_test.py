"""4 peers (processes) train a torch MLP on Fashion-MNIST through DecentralizedOptimizer with
Grapevine's optimizer, CHOCO-SGD + top-1%: the mean test accuracy of the peers' models is at least
84%, the local models are close (gossip mixed them: a run without it fails the consensus bound),
and after finalize(average=True) every peer holds identical parameters of at least 84%."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("torch")

from gv_testing import HERE, Peers, free_base_port, load_fashion_mnist, scratch  # noqa: E402

PEERS = 4
ROUNDS = 500
# Mean squared distance of the local models to their average, per parameter, before finalize.
# Measured: 7.45e-7 with gossip (the same in three runs: the run is deterministic), 1.44e-4 with
# algorithm.consensus_step 0 (no mixing; its accuracy, 85.1%, passes the 84% bar). The bound sits
# 13x above the first and 14x below the second.
CONSENSUS_BOUND = 1e-5


def test_mlp_choco_top1_percent():
    loaded = load_fashion_mnist()
    if loaded is None:
        pytest.skip("dataset-fashion-mnist is not installed (tools/install-deps)")
    d = scratch("fashion-mnist")
    train_x, train_y, test_x, test_y = loaded
    mean, std = train_x.mean(), train_x.std()
    data = os.path.join(d, "fashion.npz")
    np.savez(data, train_x=((train_x - mean) / std).reshape(-1, 784).astype(np.float32),
             train_y=train_y, test_x=((test_x - mean) / std).reshape(-1, 784).astype(np.float32),
             test_y=test_y)
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(f"run: {{ name: fashion-mnist-torch, seed: 1, rounds: {ROUNDS} }}\n"
                f"peers: {{ count: {PEERS}, host: 127.0.0.1, "
                f"base_port: {free_base_port(PEERS, 23400)} }}\n"
                "topology: { kind: ring }\n"
                "transport: { backend: tcp }\n"
                "algorithm: { name: choco, consensus_step: 0.05, round_timeout: 120 }\n"
                "compression: { method: top-k, ratio: 0.01 }\n"
                "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, schedule: cosine, "
                "min_lr: 0 }\n"
                "workload: { name: external }\n")
    peers = Peers(PEERS, os.path.join(HERE, "peers", "mlp_peer.py"), [data], config, d)
    codes = peers.wait(timeout=550)
    if codes != [0] * PEERS:
        peers.dump_logs()
    assert codes == [0] * PEERS
    results = []
    for r in range(PEERS):
        with open(os.path.join(d, f"result-{r}.json")) as f:
            results.append(json.load(f))
    accuracy = [x["local_accuracy"] for x in results]
    print("test accuracy per peer", accuracy, "after averaging",
          [x["averaged_accuracy"] for x in results],
          "train seconds", [round(x["train_seconds"], 1) for x in results],
          "process seconds", [round(x["total_seconds"], 1) for x in results])
    assert np.mean(accuracy) >= 0.84
    assert all(x["averaged_accuracy"] >= 0.84 for x in results)
    # The accuracy alone does not show that gossip worked: each peer trained alone on its shard
    # reaches it too. What gossip does is bring the models together: the mean squared distance of
    # the local models to their average, per parameter, before finalize's exact average.
    local = np.stack([np.load(os.path.join(d, f"local-params-{r}.npy")) for r in range(PEERS)])
    spread = float(np.mean((local - local.mean(axis=0)) ** 2))
    print("consensus distance before finalize", spread)
    assert spread < CONSENSUS_BOUND
    params = [np.load(os.path.join(d, f"params-{r}.npy")) for r in range(PEERS)]
    for r in range(1, PEERS):
        np.testing.assert_array_equal(params[r], params[0])
    assert all(x["events"] == [] for x in results)
    # report(test_accuracy=...) went into each peer's final record.
    for r in range(PEERS):
        with open(os.path.join(d, f"peer-{r}.final.json")) as f:
            assert json.load(f)["test_accuracy"] == pytest.approx(accuracy[r], rel=1e-12)
