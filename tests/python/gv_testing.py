"""Helpers of the Python tests: scratch folders, free ports, peer processes, data files."""

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
FASHION_DIR = "/usr/share/datasets/fashion-mnist"
GCIDE_TEXT = "/usr/share/dictd/gcide.dict.dz"  # Debian's dict-gcide: text for examples/gpt


def grapevine_bin():
    path = os.environ.get("GRAPEVINE_BIN") or os.path.join(SOURCE, "build", "bin", "grapevine")
    return path


def scratch_root():
    """Where the tests write (GRAPEVINE_TEST_TMP under ctest: build/tests/python/scratch)."""
    return os.environ.get("GRAPEVINE_TEST_TMP") or os.path.join(tempfile.gettempdir(),
                                                               "grapevine-python-tests")


def scratch(name):
    """A fresh, empty folder for one test (kept after the run for inspection)."""
    path = os.path.join(scratch_root(), name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def _port_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_ports_start():
    """The first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_base_port(peers, start):
    """A base port at or above `start` whose 2 * peers ports (control and data) are all free now,
    below the kernel's ephemeral range: a port inside it can be taken at any moment as the local
    port of some peer's outgoing connection before the peer that listens on it has bound it."""
    need = 2 * peers
    limit = _ephemeral_ports_start()
    base = start
    while base + need < limit:
        if all(_port_free(base + k) for k in range(need)):
            return base
        base += need + 7
    raise RuntimeError(f"no {need} free ports from {start} below the ephemeral range ({limit})")


def write_quadratic_data(path, peers, dim):
    """tests/test_util/quadratic.h in Python: the same generator, so the same file contents."""
    mask = (1 << 64) - 1
    s = 0x9E3779B97F4A7C15

    def nxt():
        nonlocal s
        s ^= (s << 13) & mask
        s ^= s >> 7
        s ^= (s << 17) & mask
        return (s >> 11) / 9007199254740992.0

    a, b = [], []
    for _ in range(peers):
        a.append(0.5 + 1.5 * nxt())
        b.append([4.0 * nxt() - 2.0 for _ in range(dim)])
    with open(path, "w") as f:
        json.dump({"a": a, "b": b}, f)
    return np.array(a), np.array(b)


def read_model(path):
    """A model file of the engine: GVMODEL2 (uint64 count, fp32 values, uint64 CRC32C of the bytes
    before it) or GVMODEL1 (the same without the checksum)."""
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:8] in (b"GVMODEL2", b"GVMODEL1"), path
    n = int(np.frombuffer(raw[8:16], dtype="<u8")[0])
    assert len(raw) == 16 + 4 * n + (8 if raw[:8] == b"GVMODEL2" else 0), path
    return np.frombuffer(raw[16:], dtype="<f4", count=n)


def load_fashion_mnist(limit_train=None):
    """(train_x, train_y, test_x, test_y): images as float32 in [0, 1] (N, 28, 28), labels int64.
    Returns None when Debian's dataset-fashion-mnist is not installed."""
    files = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    if not all(os.path.exists(os.path.join(FASHION_DIR, f)) for f in files):
        return None

    def idx(name):
        with gzip.open(os.path.join(FASHION_DIR, name), "rb") as f:
            raw = f.read()
        dims = raw[3]
        shape = tuple(int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(dims))
        return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)

    out = []
    for images, labels in ((files[0], files[1]), (files[2], files[3])):
        out.append(idx(images).astype(np.float32) / 255.0)
        out.append(idx(labels).astype(np.int64))
    return tuple(out)


class Peers:
    """n peer processes of `script`, each with GRAPEVINE_RANK (as `grapevine launch` sets it),
    GRAPEVINE_CONFIG, GRAPEVINE_WORLD_SIZE and GRAPEVINE_OUT; stdout+stderr to out/rank-<r>.log."""

    def __init__(self, n, script, args, config_path, out_dir, env=None):
        self.out_dir = out_dir
        self.procs = []
        self.logs = []
        base_env = dict(os.environ)
        base_env.update(env or {})
        # One BLAS/OpenMP thread per peer: many peers share few cores.
        base_env.setdefault("OMP_NUM_THREADS", "1")
        for rank in range(n):
            e = dict(base_env, GRAPEVINE_RANK=str(rank), GRAPEVINE_CONFIG=config_path,
                     GRAPEVINE_WORLD_SIZE=str(n), GRAPEVINE_OUT=out_dir)
            log = open(os.path.join(out_dir, f"rank-{rank}.log"), "w")
            self.logs.append(log)
            self.procs.append(subprocess.Popen([PYTHON, script] + list(args), env=e,
                                               stdout=log, stderr=subprocess.STDOUT))

    def log(self, rank):
        with open(os.path.join(self.out_dir, f"rank-{rank}.log")) as f:
            return f.read()

    def kill(self, rank):
        self.procs[rank].send_signal(signal.SIGKILL)

    def signal(self, rank, sig):
        self.procs[rank].send_signal(sig)

    def wait(self, timeout):
        """Exit codes of every process; kills all on timeout (then the test fails on the codes)."""
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in self.logs:
            log.close()
        return codes

    def dump_logs(self):
        for rank in range(len(self.procs)):
            sys.stdout.write(f"---- rank {rank} ----\n{self.log(rank)[-3000:]}\n")


def wait_for_file(path, procs, timeout):
    """Waits until `path` exists (progress, not wall time: the timeout only bounds a hang)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if any(p.poll() is not None for p in procs.procs):
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def external_config(name, base_port, peers=2, rounds=3, lr=0.5, **sections):
    """A config dict for peers driven through the API: ring, dsgd, no compression, plain SGD over
    tcp; `sections` update whole sections (e.g. workload={"name": "consensus"})."""
    c = {
        "run": {"name": name, "seed": 1, "rounds": rounds},
        "peers": {"count": peers, "host": "127.0.0.1", "base_port": base_port},
        "topology": {"kind": "ring"},
        "transport": {"backend": "tcp"},
        "algorithm": {"name": "dsgd", "round_timeout": 60},
        "compression": {"method": "none"},
        "optimizer": {"lr": lr, "momentum": 0.0, "schedule": "constant", "weight_decay": 0.0},
        "workload": {"name": "external"},
        "output": {"dir": os.path.join(scratch_root(), name + "-runs")},
    }
    for key, value in sections.items():
        c.setdefault(key, {}).update(value)
    return c


def run_threads(functions):
    """Runs each function in its own thread; returns their results, re-raising the first error."""
    results = [None] * len(functions)
    errors = [None] * len(functions)

    def body(k):
        try:
            results[k] = functions[k]()
        except BaseException as e:  # noqa: B902 - re-raised below
            errors[k] = e

    threads = [threading.Thread(target=body, args=(k,), daemon=True)
               for k in range(len(functions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    # A peer that failed leaves the other waiting on it: report the failure, not the wait.
    for e in errors:
        if e is not None:
            raise e
    assert not any(t.is_alive() for t in threads), "a peer thread hangs"
    return results
