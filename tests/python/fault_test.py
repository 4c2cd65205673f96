"""A SIGKILLed Python peer: its neighbours are told (a DEAD event naming it), go on, and finish;
finalize(average=True) leaves the survivors with identical parameters. A SIGSTOPped one: DEAD, then
REVIVED when it answers again, and all four finish."""

import json
import os
import signal

import pytest

pytest.importorskip("torch")

from gv_testing import HERE, Peers, free_base_port, scratch, wait_for_file  # noqa: E402

PEERS = 4
VICTIM = 3
STOP_ROUND = 10


def write_config(d, name, port_hint):
    """4 peers on a ring, dsgd over tcp, the external workload. A long round timeout: the others
    wait for the victim (alive, heartbeating) until it is killed or stopped, so they cannot run
    ahead; dead_after then ends the wait."""
    config = os.path.join(d, "config.yaml")
    with open(config, "w") as f:
        f.write(f"run: {{ name: {name}, seed: 1, rounds: 40 }}\n"
                f"peers: {{ count: {PEERS}, host: 127.0.0.1, "
                f"base_port: {free_base_port(PEERS, port_hint)}, heartbeat_interval: 0.1, "
                "dead_after: 1.0 }\n"
                "topology: { kind: ring }\n"
                "transport: { backend: tcp }\n"
                "algorithm: { name: dsgd, round_timeout: 60 }\n"
                "compression: { method: none }\n"
                "workload: { name: external }\n")
    return config


def test_killed_peer():
    d = scratch("fault")
    config = write_config(d, "fault", 23500)
    peers = Peers(PEERS, os.path.join(HERE, "peers", "fault_peer.py"),
                  [str(VICTIM), str(STOP_ROUND)], config, d)
    reached = wait_for_file(os.path.join(d, "victim-waiting"), peers, timeout=240)
    if not reached:
        peers.wait(timeout=1)
        peers.dump_logs()
    assert reached
    peers.kill(VICTIM)
    codes = peers.wait(timeout=240)
    if codes[:VICTIM] != [0] * VICTIM:
        peers.dump_logs()
    assert codes[VICTIM] == -9
    assert codes[:VICTIM] == [0] * VICTIM
    results = []
    for r in range(VICTIM):
        with open(os.path.join(d, f"result-{r}.json")) as f:
            results.append(json.load(f))
    for r in (0, 2):  # the victim's neighbours on the ring
        dead = [e for e in results[r]["events"] if e["kind"] == "DEAD"]
        assert [e["peer"] for e in dead] == [VICTIM], results[r]["events"]
    for x in results:
        assert x["rounds"] == 40
    for x in results[1:]:
        assert x["params"] == results[0]["params"]


def test_paused_peer_comes_back():
    """A peer SIGSTOPped past peers.dead_after: its neighbours are told DEAD, then REVIVED when it
    answers again; all four finish, and finalize(average=True) gives all four the same model."""
    d = scratch("pause")
    config = write_config(d, "pause", 23600)
    peers = Peers(PEERS, os.path.join(HERE, "peers", "fault_peer.py"),
                  [str(VICTIM), str(STOP_ROUND), "pause"], config, d)
    ok = wait_for_file(os.path.join(d, "victim-waiting"), peers, timeout=240)
    if ok:
        peers.signal(VICTIM, signal.SIGSTOP)
        # Its neighbours (0 and 2 on the ring) drop it once it has been silent for dead_after.
        ok = all(wait_for_file(os.path.join(d, f"saw-dead-{r}"), peers, timeout=240)
                 for r in (0, 2))
        peers.signal(VICTIM, signal.SIGCONT)
    with open(os.path.join(d, "go"), "w") as f:
        f.write("go")
    codes = peers.wait(timeout=240)
    if not ok or codes != [0] * PEERS:
        peers.dump_logs()
    assert ok
    assert codes == [0] * PEERS
    results = []
    for r in range(PEERS):
        with open(os.path.join(d, f"result-{r}.json")) as f:
            results.append(json.load(f))
    for r in (0, 2):
        kinds = [(e["kind"], e["peer"]) for e in results[r]["events"] if e["kind"] != "SUSPECT"]
        assert kinds == [("DEAD", VICTIM), ("REVIVED", VICTIM)], results[r]["events"]
    for x in results:
        assert x["rounds"] == 40
    for x in results[1:]:
        assert x["params"] == results[0]["params"]
