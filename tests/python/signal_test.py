"""Ctrl-C and SIGTERM reach a Python training program that imported Grapevine (#39 item 1).

libfabric's PSM provider used to be linked into the extension, and loading it let libinfinipath
take SIGINT, SIGTERM and SIGABRT: Ctrl-C killed the program at once with status 1, with no
KeyboardInterrupt, no `finally`, no finalize and no last checkpoint. These tests fail on that code.
"""

import json
import os
import signal
import subprocess
import time

import pytest

pytest.importorskip("torch")

from gv_testing import (HERE, PYTHON, Peers, free_base_port, grapevine_bin,  # noqa: E402
                        scratch)

PEERS = 2


# Sends this process SIGINT; prints whether it raised KeyboardInterrupt (the code run_python runs).
SIGINT_PROBE = """
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    print("no KeyboardInterrupt")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
"""


def run_python(code, timeout=120):
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=timeout)


def test_import_keeps_sigint_and_sigterm():
    """After `import grapevine` (and after a libfabric peer existed), SIGINT still raises
    KeyboardInterrupt and a SIGTERM handler set before the import still runs."""
    code = """
import os, signal, sys, time
seen = []
signal.signal(signal.SIGTERM, lambda s, f: seen.append("term"))
import grapevine.torch
""" + SIGINT_PROBE + """
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.2)
print("handler ran" if seen == ["term"] else "handler did not run")
"""
    r = run_python(code)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n")[:2] == ["KeyboardInterrupt", "handler ran"], r.stdout + r.stderr


def test_libfabric_peer_keeps_sigint():
    """The libfabric backend loads libfabric (and with it libinfinipath) when a peer first uses
    it: the handlers are what they were before."""
    d = scratch("signal-libfabric")
    port = free_base_port(1, 24300)
    code = f"""
import os, signal, time
import grapevine
config = {{"run": {{"name": "sig", "seed": 1, "rounds": 2}},
          "peers": {{"count": 1, "host": "127.0.0.1", "base_port": {port}}},
          "topology": {{"kind": "ring"}}, "transport": {{"backend": "libfabric"}},
          "algorithm": {{"name": "dsgd"}}, "compression": {{"method": "none"}},
          "workload": {{"name": "external"}}, "output": {{"dir": {d!r}}}}}
import numpy as np
w = np.zeros(4, dtype=np.float32)
with grapevine.Peer(config, rank=0) as peer:
    peer.add_tensor("w", w)
    peer.start()
    maps = open("/proc/self/maps").read()
    print("libfabric loaded" if "libfabric" in maps else "libfabric not loaded")
""" + SIGINT_PROBE
    r = run_python(code)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n")[:2] == ["libfabric loaded", "KeyboardInterrupt"], \
        r.stdout + r.stderr


def write_config(d, port_hint):
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(f"run: {{ name: sig, seed: 1, rounds: 100000 }}\n"
                f"peers: {{ count: {PEERS}, host: 127.0.0.1, "
                f"base_port: {free_base_port(PEERS, port_hint)} }}\n"
                "topology: { kind: ring }\n"
                "transport: { backend: tcp }\n"
                "algorithm: { name: dsgd }\n"
                "compression: { method: none }\n"
                "workload: { name: external }\n"
                f"output: {{ dir: {d} }}\n")
    return config


def wait_progress(d, procs, rounds=5, timeout=240):
    """Every peer has reached `rounds` (progress, not wall time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        done = 0
        for r in range(PEERS):
            try:
                with open(os.path.join(d, f"progress-{r}")) as f:
                    done += int(f.read() or -1) >= rounds
            except (OSError, ValueError):
                pass
        if done == PEERS:
            return True
        time.sleep(0.05)
    return False


def finished_checkpoints(d):
    import torch
    rounds = []
    for r in range(PEERS):
        state = torch.load(os.path.join(d, f"checkpoint-{r}.pt"))
        rounds.append(state["grapevine"]["rounds"])
    return rounds


def test_sigterm_runs_the_users_handler():
    """A preemption notice (SIGTERM) to each peer: the handler set before `import grapevine` runs,
    `finally` saves the last checkpoint, the optimizer finalizes (peer-<r>.final.json)."""
    d = scratch("signal-term")
    peers = Peers(PEERS, os.path.join(HERE, "peers", "signal_peer.py"), ["term"],
                  write_config(d, 24400), d)
    ok = wait_progress(d, peers.procs)
    for r in range(PEERS):
        peers.signal(r, signal.SIGTERM)
    codes = peers.wait(timeout=120)
    if not ok or codes != [143] * PEERS:
        peers.dump_logs()
    assert ok
    assert codes == [143] * PEERS
    for r in range(PEERS):
        assert os.path.exists(os.path.join(d, f"preempted-{r}"))
        assert os.path.exists(os.path.join(d, f"peer-{r}.final.json"))
    assert min(finished_checkpoints(d)) >= 5


def test_launch_ctrl_c():
    """Ctrl-C on `grapevine launch ... -- python3 program`: every peer gets KeyboardInterrupt,
    finalizes and saves its last checkpoint; launch says the run was interrupted."""
    d = scratch("signal-launch")
    config = write_config(d, 24500)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    log = open(os.path.join(d, "launch.log"), "w")
    launch = subprocess.Popen([grapevine_bin(), "launch", config, "--", PYTHON,
                               os.path.join(HERE, "peers", "signal_peer.py"), "int"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    ok = wait_progress(d, [launch])
    launch.send_signal(signal.SIGINT)
    try:
        code = launch.wait(timeout=120)
    except subprocess.TimeoutExpired:
        launch.kill()
        code = None
    log.close()
    with open(os.path.join(d, "launch.log")) as f:
        text = f.read()
    assert ok, text
    assert code == 1, text
    assert "interrupted" in text, text
    for r in range(PEERS):
        assert os.path.exists(os.path.join(d, f"interrupted-{r}")), text
        assert os.path.exists(os.path.join(d, f"peer-{r}.final.json")), text
    assert min(finished_checkpoints(d)) >= 5
    with open(os.path.join(d, "summary.json")) as f:
        summary = json.load(f)
    assert summary["interrupted"] == "SIGINT", summary
