"""A Python program resumes (#39 item 2): every peer killed at round 17, started again with
GRAPEVINE_RESUME=1 (by hand, and by `grapevine launch --resume -- COMMAND`), continues after the
newest common checkpoint (round 14) with the round counter, the lr schedule, Grapevine's state and
the wrapped AdamW's state of that round, keeps its records, averages at the end, and ends with the
parameters of an undisturbed run, bit for bit."""

import json
import os
import subprocess

import pytest

pytest.importorskip("torch")

from gv_testing import HERE, PYTHON, Peers, free_base_port, grapevine_bin, scratch  # noqa: E402

PEERS = 2
ROUNDS = 30
DIE = 17
CHECKPOINT = 14  # checkpoint.every 5: rounds 4, 9, 14 before the kill
SCRIPT = os.path.join(HERE, "peers", "resume_peer.py")


def write_config(d, port_hint, outer=False):
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(f"run: {{ name: resume, seed: 1, rounds: {ROUNDS} }}\n"
                f"peers: {{ count: {PEERS}, host: 127.0.0.1, "
                f"base_port: {free_base_port(PEERS, port_hint)} }}\n"
                "topology: { kind: ring }\n"
                "transport: { backend: tcp }\n"
                "algorithm: { name: choco }\n"
                "compression: { method: none }\n"
                "optimizer: { lr: 0.05, momentum: 0.9, schedule: cosine }\n"
                "checkpoint: { every: 5, keep: 2, background: false }\n"
                "workload: { name: external }\n"
                f"output: {{ dir: {d}, log_every: 1 }}\n"
                + ("outer: { optimizer: nesterov, lr: 0.7, momentum: 0.9 }\n" if outer else ""))
    return config


def run_peers(d, config, args, env=None):
    peers = Peers(PEERS, SCRIPT, args, config, d, env=env)
    codes = peers.wait(timeout=240)
    return peers, codes


def results(d):
    out = []
    for r in range(PEERS):
        with open(os.path.join(d, f"result-{r}.json")) as f:
            out.append(json.load(f))
    return out


def record_rounds(d, rank):
    rounds = []
    with open(os.path.join(d, f"peer-{rank}.jsonl")) as f:
        for line in f:
            x = json.loads(line)
            if not x.get("final"):
                rounds.append(x["round"])
    return rounds


# The outer optimizer's momentum and anchor (with the caller's AdamW steps between mix() calls) are
# state too.
@pytest.mark.parametrize("kind,via_launch,outer",
                         [("adamw", False, False), ("own", True, False), ("adamw", False, True)])
def test_resume_is_bit_identical(kind, via_launch, outer):
    name = kind + ("-outer" if outer else "")
    full = scratch(f"resume-{name}-full")
    peers, codes = run_peers(full, write_config(full, 24800, outer), [kind])
    if codes != [0] * PEERS:
        peers.dump_logs()
    assert codes == [0] * PEERS
    expected = results(full)

    d = scratch(f"resume-{name}-killed")
    config = write_config(d, 24900, outer)
    peers, codes = run_peers(d, config, [kind, f"die:{DIE}"])
    assert codes == [1] * PEERS, codes
    if via_launch:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        launch = subprocess.run([grapevine_bin(), "launch", config, "--resume", "--", PYTHON,
                                 SCRIPT, kind], env=env, capture_output=True, text=True,
                                timeout=240)
        assert launch.returncode == 0, launch.stdout + launch.stderr
    else:
        peers, codes = run_peers(d, config, [kind], env={"GRAPEVINE_RESUME": "1"})
        if codes != [0] * PEERS:
            peers.dump_logs()
        assert codes == [0] * PEERS
    got = results(d)
    for r in range(PEERS):
        assert got[r]["start_round"] == CHECKPOINT + 1
        assert got[r]["resumed_from_round"] == CHECKPOINT
        assert got[r]["params"] == expected[r]["params"], f"rank {r}"
        # The first attempt's records up to the checkpoint, then the resumed rounds: each once.
        assert record_rounds(d, r) == list(range(ROUNDS))
    assert got[0]["params"] == got[1]["params"]  # averaged: finalize knew the run was complete
    if kind == "adamw":  # the optimizer's files follow Grapevine's (checkpoint.keep 2)
        folder = os.path.join(d, "checkpoints", "rank-0")
        names = sorted(os.listdir(folder))
        assert [n for n in names if n.endswith(".torch.pt")] == \
            [n.replace(".ckpt", ".torch.pt") for n in names if n.endswith(".ckpt")], names
