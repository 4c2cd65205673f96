"""Exactness through Python: the engine's quadratic workload written in torch, 16 peers (processes)
on a ring, D-PSGD, lr 0.01 constant. The averaged model's distance to the optimum equals what the
engine's own quadratic workload gives (`grapevine sim`, summary.json optimum_distance) for the same
data file, to relative 1e-6: once with Grapevine's optimizer, once with a caller-owned
torch.optim.SGD."""

import json
import os
import subprocess

import numpy as np
import pytest

pytest.importorskip("torch")

from gv_testing import (HERE, Peers, free_base_port, grapevine_bin, read_model,  # noqa: E402
                        scratch, write_quadratic_data)

PEERS = 16
DIM = 20
ROUNDS = 300


def yaml(workload, base_port):
    return (f"run: {{ name: exactness, seed: 3, rounds: {ROUNDS} }}\n"
            # 16 processes on 2 cores: a starved peer must not be declared dead (this test is
            # about exactness, not fault handling).
            f"peers: {{ count: {PEERS}, host: 127.0.0.1, base_port: {base_port}, "
            "dead_after: 60 }\n"
            "topology: { kind: ring }\n"
            "transport: { backend: tcp }\n"
            "algorithm: { name: dsgd, round_timeout: 120 }\n"
            "compression: { method: none }\n"
            "optimizer: { lr: 0.01, momentum: 0, schedule: constant, weight_decay: 0 }\n"
            f"workload: {workload}\n")


@pytest.fixture(scope="module")
def reference():
    """The engine's run of the same problem: (data path, a, b, summary, per-rank models)."""
    d = scratch("exactness-sim")
    data = os.path.join(d, "quad16.json")
    a, b = write_quadratic_data(data, PEERS, DIM)
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(yaml(f"{{ name: quadratic, data: {data} }}", 29500))
    subprocess.run([grapevine_bin(), "sim", config, "--out", os.path.join(d, "sim"), "--quiet"],
                   check=True)
    with open(os.path.join(d, "sim", "summary.json")) as f:
        summary = json.load(f)
    return data, a, b, summary, os.path.join(d, "sim")


def optimum(a, b):
    """x* = sum a_i b_i / sum a_i^2 in double, rounded to fp32 (QuadraticWorkload's optimum())."""
    return ((a[:, None] * b).sum(axis=0) / (a * a).sum()).astype(np.float32)


def optimum_distance(models, opt):
    """|mean_i x_i - x*|^2 with the mean in double, as the engine's summary computes it."""
    mean = np.zeros(models[0].shape, dtype=np.float64)
    for x in models:
        mean += x.astype(np.float64)
    mean /= len(models)
    return float(((mean - opt.astype(np.float64)) ** 2).sum())


@pytest.mark.parametrize("mode,port", [("grapevine", 23300), ("sgd", 23360)])
def test_torch_quadratic_equals_engine(reference, mode, port):
    data, a, b, summary, sim = reference
    d = scratch(f"exactness-{mode}")
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(yaml("{ name: external }", free_base_port(PEERS, port)))
    peers = Peers(PEERS, os.path.join(HERE, "peers", "quadratic_peer.py"), [data, mode], config, d)
    codes = peers.wait(timeout=500)
    if codes != [0] * PEERS:
        peers.dump_logs()
    assert codes == [0] * PEERS
    models = [np.load(os.path.join(d, f"x-{r}.npy")) for r in range(PEERS)]
    engine = summary["optimum_distance"]
    ours = optimum_distance(models, optimum(a, b))
    print(f"{mode}: optimum distance through torch {ours!r}, engine {engine!r}")
    assert engine > 0
    assert abs(ours - engine) <= 1e-6 * engine
    if mode == "grapevine":
        # Grapevine's optimizer fed torch's gradients is the engine's path exactly (one path, one
        # result): every peer's model is bit-identical to the simulator's.
        for r in range(PEERS):
            np.testing.assert_array_equal(models[r], read_model(os.path.join(sim, f"model-{r}.bin")))
    # finalize(average=True): every peer holds the same model, the average of the peers' models.
    averaged = [np.load(os.path.join(d, f"avg-{r}.npy")) for r in range(PEERS)]
    for r in range(1, PEERS):
        np.testing.assert_array_equal(averaged[r], averaged[0])
    mean = np.mean(np.stack(models).astype(np.float64), axis=0)
    assert np.linalg.norm(averaged[0] - mean) <= 1e-5 * np.linalg.norm(mean)
