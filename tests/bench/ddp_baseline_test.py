#!/usr/bin/python3
"""Tests of tools/bench/ddp_baseline.py: its pure parts against Grapevine's formulas, and real
2-rank gloo runs on 127.0.0.1 (plain DDP for 60 steps, PowerSGD for a few, DiLoCo: H = 1 against
local SGD computed here, and 60 steps with the published outer optimizer).

Usage: ddp_baseline_test.py [--grapevine PATH_TO_BIN]. Exits 77 (ctest skip) when the system
interpreter has no torch. The run with measured bytes needs root (a private network namespace via
unshare, so the loopback counters hold only this test's traffic); without it that case says so.
"""

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(SOURCE, "tools", "bench", "ddp_baseline.py")
PYTHON = "/usr/bin/python3"

sys.path.insert(0, os.path.join(SOURCE, "tests", "test_util"))
from gv_skip import exit_missing  # noqa: E402

try:
    import numpy as np
    import torch
except ImportError:
    exit_missing("ddp_baseline_test.py", "torch", "python3-torch not installed (tools/install-deps --bench)")

sys.path.insert(0, os.path.dirname(SCRIPT))
import ddp_baseline as ddp  # noqa: E402

failures = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what, flush=True)
    if not condition:
        failures.append(what)


def close(a, b, tol=1e-12):
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


# ---- pure parts ------------------------------------------------------------------------------

def test_schedule():
    s = ddp.LrSchedule("cosine", 0.1, 100, warmup_rounds=10, min_lr=0.01)
    check(close(s.at(0), 0.01) and close(s.at(9), 0.1), "warmup: lr * (round + 1) / warmup_rounds")
    check(close(s.at(10), 0.1), "cosine starts at lr after warmup")
    check(close(s.at(55), 0.01 + 0.09 * 0.5), "cosine half way is (lr + min_lr) / 2")
    check(close(s.at(100), 0.01) and close(s.at(500), 0.01), "cosine floor at and after the end")
    st = ddp.LrSchedule("step", 0.2, 100, milestones=[10, 20], gamma=0.5)
    check([round(st.at(r), 12) for r in (0, 9, 10, 19, 20, 99)] == [0.2, 0.2, 0.1, 0.1, 0.05, 0.05],
          "step: lr * gamma^(milestones <= round)")
    check(close(ddp.LrSchedule("constant", 0.3, 5).at(1000), 0.3), "constant")


def test_data_and_partition(train_x, train_y):
    table = ddp.pixel_table(train_x)
    x = table[train_x[:20000]].astype(np.float64)
    check(abs(x.mean()) < 0.05 and abs(x.std() - 1.0) < 0.05,
          f"standardised pixels: mean {x.mean():.4f}, std {x.std():.4f} (train statistics)")
    shards = ddp.iid_partition(60000, 7, seed=3)
    sizes = [len(s) for s in shards]
    allidx = np.concatenate(shards)
    check(sizes == [8572] * 3 + [8571] * 4, f"iid shard sizes as Grapevine's (first n % peers + 1): {sizes}")
    check(len(np.unique(allidx)) == 60000, "iid shards are disjoint and cover the training set")
    check(all(np.array_equal(a, b) for a, b in zip(shards, ddp.iid_partition(60000, 7, seed=3))),
          "iid partition is a function of the seed")
    check(not np.array_equal(shards[0], ddp.iid_partition(60000, 7, seed=4)[0]), "another seed, other shards")
    d = ddp.dirichlet_partition(train_y, 10, 4, 0.3, seed=1)
    check(sum(len(s) for s in d) == 60000 and len(np.unique(np.concatenate(d))) == 60000,
          "dirichlet shards are disjoint and cover the training set")
    stream = ddp.BatchStream(np.arange(100, 150), batch=7, seed=1, rank=2)
    seen = np.concatenate([stream.indices(k) for k in range(15)])  # 105 samples, 2 epochs + 5
    check(sorted(seen[:50]) == list(range(100, 150)) and sorted(seen[50:100]) == list(range(100, 150)),
          "batch stream: each epoch visits every sample of the shard once")
    check(not np.array_equal(seen[:50], seen[50:100]), "batch stream: each epoch in a new order")


def test_model():
    net = ddp.make_mlp(784, [1024, 256], 10, seed=5)
    count = sum(p.numel() for p in net.parameters())
    check(count == 784 * 1024 + 1024 + 1024 * 256 + 256 + 256 * 10 + 10 == 1068810,
          f"[1024, 256] MLP has {count} parameters (>= 1 M)")
    w1, b1, w2, _, w3, b3 = [p.detach() for p in net.parameters()]
    he, glorot = math.sqrt(6 / 784), math.sqrt(6 / (256 + 10))
    check(float(w1.abs().max()) <= he and float(w1.abs().max()) > 0.99 * he,
          "hidden layer: He-uniform bound sqrt(6 / fan_in)")
    check(abs(float(w1.std()) - he / math.sqrt(3)) < 0.01 * he, "hidden layer: uniform variance")
    check(float(w3.abs().max()) <= glorot and float(w3.abs().max()) > 0.95 * glorot,
          "output layer: Glorot-uniform bound sqrt(6 / (fan_in + fan_out))")
    check(float(b1.abs().max()) == 0 and float(b3.abs().max()) == 0, "zero biases")
    check(torch.equal(w2, ddp.make_mlp(784, [1024, 256], 10, seed=5)[2].weight.detach()),
          "initialisation is a function of the seed")


def test_optimizer():
    for nesterov in (False, True):
        gen = torch.Generator().manual_seed(1)
        a = torch.nn.Parameter(torch.randn(50, generator=gen))
        b = torch.nn.Parameter(a.detach().clone())
        mine = ddp.GrapevineSgd([a], 0.9, nesterov, 1e-3)
        ref = torch.optim.SGD([b], lr=0.1, momentum=0.9, nesterov=nesterov, weight_decay=1e-3)
        for lr in (0.1, 0.05, 0.2, 0.1):
            g = torch.randn(50, generator=gen)
            a.grad, b.grad = g.clone(), g.clone()
            mine.step(lr)
            for group in ref.param_groups:
                group["lr"] = lr
            ref.step()
        check(torch.allclose(a, b, rtol=1e-6, atol=1e-7),
              f"local momentum (nesterov={nesterov}) equals torch.optim.SGD: Grapevine's formulas")
    # quasi-global, heavy ball, by hand: u = g + beta * mhat; mhat <- beta * mhat + (1 - beta) * u
    x = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    qg = ddp.GrapevineSgd([x], 0.5, False, 0.0, kind="quasi-global")
    x.grad = torch.tensor([1.0, 1.0])
    qg.step(0.1)  # u = g = [1, 1]; x = [0.9, -2.1]; mhat = [0.5, 0.5]
    x.grad = torch.tensor([2.0, 0.0])
    qg.step(0.1)  # u = [2.25, 0.25]; x = [0.675, -2.125]
    check(torch.allclose(x.detach(), torch.tensor([0.675, -2.125])), "quasi-global momentum formula")


def test_config(grapevine):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "c.yaml")
        with open(path, "w") as f:
            f.write("run: { seed: 7, rounds: 300 }\npeers: { count: 2 }\n"
                    "optimizer: { lr: 0.02, batch_size: 16, schedule: cosine, warmup_rounds: 5 }\n"
                    "workload: { name: fashion-mnist-mlp, hidden: [32, 16], eval_every: 50 }\n")
        env = {"GRAPEVINE_OPTIMIZER_MOMENTUM": "0.5", "GRAPEVINE_WORKLOAD_HIDDEN": "[48]"}
        values = ddp.load_config(path, environ=env)
        check(values["run.seed"] == 7 and values["optimizer.lr"] == 0.02 and values["optimizer.schedule"] == "cosine",
              "config: YAML values read")
        check(values["optimizer.momentum"] == 0.5 and values["workload.hidden"] == [48],
              "config: GRAPEVINE_* environment overrides YAML")
        old = dict(os.environ)
        os.environ.update(env)
        try:
            args = ddp.build_parser().parse_args(["--rank", "0", "--world-size", "1", "--master-addr", "x",
                                                  "--master-port", "1", "--config", path, "--lr", "0.3"])
            s = ddp.resolve(args)
        finally:
            os.environ.clear()
            os.environ.update(old)
        check(s["lr"] == 0.3 and s["hidden"] == [48] and s["steps"] == 300 and s["batch_size"] == 16,
              "config: flags override environment and YAML; steps default to run.rounds")
        if not grapevine or not os.access(grapevine, os.X_OK):
            print(f"note  not compared with `grapevine config` (binary {grapevine!r} not built)")
            return
        import yaml
        envall = dict(os.environ, **env)
        text = subprocess.run([grapevine, "config", path], env=envall, capture_output=True, text=True,
                              check=True).stdout
        effective = yaml.safe_load(text)
        mismatched = []
        for key, value in values.items():
            section, name = key.split(".", 1)
            theirs = effective[section][name]
            if (theirs != value) and not (isinstance(value, float) and close(float(theirs), value)):
                mismatched.append(f"{key}: ours {value!r}, grapevine {theirs!r}")
        check(not mismatched, "config: defaults, YAML and environment resolve as `grapevine config` does "
              + "; ".join(mismatched))


def test_outer_step():
    """DiLoCo's outer Nesterov step against the formulas written out here in numpy (float64)."""
    rng = np.random.default_rng(11)
    theta = rng.standard_normal(40)
    deltas = [rng.standard_normal(40) for _ in range(3)]
    lr, mu = 0.7, 0.9
    expected, m = theta.copy(), np.zeros(40)
    for d in deltas:
        m = mu * m + d
        expected = expected - lr * (d + mu * m)
    outer = torch.tensor(theta)
    opt = ddp.OuterNesterov(lr, mu, nesterov=True)
    for d in deltas:
        opt.step(outer, torch.tensor(d))
    check(np.allclose(outer.numpy(), expected, rtol=1e-12, atol=1e-12),
          "outer step: m <- mu m + delta; theta <- theta - lr (delta + mu m), three steps by hand")
    first = theta - lr * (1 + mu) * deltas[0]
    check(not np.allclose(outer.numpy(), first), "outer step: momentum carries over between outer steps")
    heavy = torch.tensor(theta)
    hb = ddp.OuterNesterov(lr, mu, nesterov=False)
    m, expected = np.zeros(40), theta.copy()
    for d in deltas:
        hb.step(heavy, torch.tensor(d))
        m = mu * m + d
        expected = expected - lr * m
    check(np.allclose(heavy.numpy(), expected, rtol=1e-12, atol=1e-12), "outer step: heavy ball without Nesterov")
    plain = torch.tensor(theta)
    ddp.OuterNesterov(1.0, 0.0).step(plain, torch.tensor(deltas[0]))
    check(np.allclose(plain.numpy(), theta - deltas[0]), "outer step: lr 1, momentum 0 is theta - delta")
    for bad in ((0.0, 0.9), (0.7, 1.0), (0.7, -0.1)):
        try:
            ddp.OuterNesterov(*bad)
            check(False, f"outer step: lr {bad[0]}, momentum {bad[1]} refused")
        except ValueError:
            check(True, f"outer step: lr {bad[0]}, momentum {bad[1]} refused")


# ---- real runs -------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(tmp, name, extra, world=2, wrap=None, timeout=120, tag="[ddp"):
    """Starts `world` ranks (optionally all inside one `wrap` command) and returns rank 0's records."""
    port = free_port()
    out = os.path.join(tmp, name + ".jsonl")
    cmds = []
    for r in range(world):
        cmd = [PYTHON, SCRIPT, "--rank", str(r), "--world-size", str(world), "--master-addr", "127.0.0.1",
               "--master-port", str(port), "--threads", "1", "--timeout", "60"] + extra
        if r == 0:
            cmd += ["--out", out]
        cmds.append(cmd)
    start = time.monotonic()
    if wrap:
        # One shell in the private namespace starts every rank and waits for all of them.
        script = "set -e; " + wrap[1] + "; " + " ".join(
            "(" + " ".join(cmd) + ") & " for cmd in cmds) + "wait"
        procs = [subprocess.Popen(wrap[0] + [script], stderr=subprocess.PIPE, text=True)]
    else:
        procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) for cmd in cmds]
    codes, errs = [], []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        codes.append(p.returncode)
        errs.append(err)
    print(f"      {name}: {world} ranks in {time.monotonic() - start:.1f} s", flush=True)
    if any(codes):
        print("".join(errs), file=sys.stderr)
    check(not any(codes), f"{name}: every rank exits 0 ({codes})")
    with open(out) as f:
        records = [json.loads(line) for line in f if line.strip()]
    check(tag in errs[0], f"{name}: progress lines on rank 0's stderr")
    return records


def check_records(name, records, system, steps, every):
    """Checks the records' shape; returns (evaluation records, final record)."""
    evals = [r for r in records if not r.get("final")]
    finals = [r for r in records if r.get("final")]
    check(len(finals) == 1 and records[-1].get("final"), f"{name}: exactly one final record, last")
    fields = ["system", "step", "wall_s", "test_accuracy", "train_loss", "bytes_sent_per_peer"]
    check(all(all(k in r for k in fields) for r in records), f"{name}: every record has {fields}")
    check(all(r["system"] == system for r in records), f"{name}: system is {system}")
    check([r["step"] for r in evals] == list(range(every, steps + 1, every)),
          f"{name}: one evaluation every {every} steps: {[r['step'] for r in evals]}")
    walls = [r["wall_s"] for r in evals]
    check(all(b > a for a, b in zip(walls, walls[1:])) and walls[0] > 0, f"{name}: training clock increases")
    sent = [r["bytes_sent_per_peer"] for r in evals]
    check(all(b > a for a, b in zip(sent, sent[1:])), f"{name}: bytes sent increase")
    final = finals[0]
    check("time_to_80" in final and "time_to_85" in final, f"{name}: final has time_to_80 and time_to_85")
    check(final["steps"] == steps and final["settings"]["world_size"] == 2, f"{name}: final totals")
    return evals, final


def test_runs(tmp):
    common = ["--hidden", "64", "--batch-size", "32", "--lr", "0.05", "--momentum", "0.9", "--seed", "3"]
    # Plain DDP, 60 steps. As root, inside a private network namespace so that `lo`'s counter holds
    # exactly this run's traffic (both ranks send over the one `lo`, so each reads their sum).
    measured = os.geteuid() == 0 and subprocess.run(
        ["unshare", "--net", "--mount", "true"], capture_output=True).returncode == 0
    wrap = (["unshare", "--net", "--mount", "sh", "-c"], "mount -t sysfs none /sys; ip link set lo up") \
        if measured else None
    extra = common + ["--steps", "60", "--eval-every", "20"] + (["--ifname", "lo"] if measured else [])
    records = run_ranks(tmp, "ddp", extra, wrap=wrap)
    evals, final = check_records("ddp", records, "ddp", 60, 20)
    check(final["test_accuracy"] > 0.5, f"ddp: test accuracy after 60 steps {final['test_accuracy']:.3f} > 0.5")
    check(evals[-1]["train_loss"] < evals[0]["train_loss"], "ddp: training loss falls")
    check(sum(final["bucket_bytes"]) == 4 * (784 * 64 + 64 + 64 * 10 + 10), "ddp: buckets hold every gradient")
    model = ddp.make_mlp(784, [64], 10, seed=3)
    estimate = ddp.allreduce_bytes_per_step([tuple(p.shape) for p in model.parameters()], 2) * 60
    if measured:
        ratio = final["bytes_sent_per_peer"] / (2 * estimate)
        check("bytes_estimated" not in final and 1.0 <= ratio < 1.3,
              f"ddp: measured lo tx bytes / (2 ranks x ring estimate) = {ratio:.3f} in [1, 1.3)")
    else:
        print("note  bytes counted analytically only: the measured case needs root (unshare --net)")
        check(final.get("bytes_estimated") is True and close(final["bytes_sent_per_peer"], estimate, 1e-9),
              "ddp: estimated bytes = ring all-reduce of the gradient per step")

    # PowerSGD, rank 2, compressing from step 4 on: compressed steps send far fewer bytes.
    # [512]: 1.6 MB of first-layer weights, which DDP's default bucketing would split off into a
    # second bucket (its first bucket holds 1 MB); PowerSGD must run on one bucket (see the script).
    common = [v if v != "64" else "512" for v in common]
    records = run_ranks(tmp, "powersgd", common + ["--steps", "12", "--eval-every", "4", "--hook", "powersgd",
                                                   "--powersgd-rank", "2", "--powersgd-start", "4"])
    evals, final = check_records("powersgd", records, "ddp-powersgd", 12, 4)
    dense = evals[0]["bytes_sent_per_peer"] / 4
    compressed = (evals[2]["bytes_sent_per_peer"] - evals[1]["bytes_sent_per_peer"]) / 4
    check(compressed < dense / 5, f"powersgd: bytes per step {compressed:.0f} compressed vs {dense:.0f} dense")
    check(final["test_accuracy"] > 0.3, f"powersgd: learns ({final['test_accuracy']:.3f} after 12 steps)")
    check(final["settings"]["powersgd_rank"] == 2, "powersgd: rank recorded")
    check(len(final["bucket_bytes"]) == 1, f"powersgd: one gradient bucket {final['bucket_bytes']}")


def local_sgd_reference(data, hidden, batch, lr, seed, steps, world=2):
    """Synchronous local SGD computed in this process: every rank takes one step of Grapevine's
    optimizer (its own momentum) on its own stream, then all ranks' parameters are replaced by their
    average. Returns (the averaged parameters, rank 0's parameters had it never averaged)."""
    train_x, train_y = data[0], data[1]
    table = ddp.pixel_table(train_x)
    shards = ddp.iid_partition(len(train_y), world, seed)
    torch.set_num_threads(1)  # the ranks run one thread each: same reduction order in the matmuls
    nets = [ddp.make_mlp(784, hidden, 10, seed) for _ in range(world)]
    alone = ddp.make_mlp(784, hidden, 10, seed)
    opts = [ddp.GrapevineSgd(n.parameters(), 0.9, True, 0.0) for n in nets + [alone]]
    streams = [ddp.BatchStream(shards[r], batch, seed, r) for r in range(world)]
    for step in range(steps):
        for r, net in enumerate(nets + [alone]):
            idx = streams[r if r < world else 0].indices(step)
            loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(table[train_x[idx]])),
                                                     torch.from_numpy(train_y[idx]))
            opts[r].zero_grad()
            loss.backward()
            opts[r].step(lr)
        with torch.no_grad():
            for ps in zip(*[n.parameters() for n in nets]):
                mean = sum(p.detach().clone() for p in ps) / world
                for p in ps:
                    p.copy_(mean)
    return [p.detach().numpy() for p in nets[0].parameters()], [p.detach().numpy() for p in alone.parameters()]


def ddp_reference(data, hidden, batch, lr, seed, steps, world=2):
    """Synchronous data parallelism computed in this process: one model; every step each rank's
    gradient on its own batch stream, their average applied by Grapevine's optimizer (what DDP's
    all-reduce does). Returns (its parameters, rank 0's had it never averaged)."""
    train_x, train_y = data[0], data[1]
    table = ddp.pixel_table(train_x)
    shards = ddp.iid_partition(len(train_y), world, seed)
    torch.set_num_threads(1)
    net = ddp.make_mlp(784, hidden, 10, seed)
    alone = ddp.make_mlp(784, hidden, 10, seed)
    opt = ddp.GrapevineSgd(net.parameters(), 0.9, True, 0.0)
    alone_opt = ddp.GrapevineSgd(alone.parameters(), 0.9, True, 0.0)
    streams = [ddp.BatchStream(shards[r], batch, seed, r) for r in range(world)]

    def grads(model, r, step):
        idx = streams[r].indices(step)
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(table[train_x[idx]])),
                                          torch.from_numpy(train_y[idx])).backward()
        return [p.grad.detach().clone() for p in model.parameters()]

    for step in range(steps):
        per_rank = [grads(net, r, step) for r in range(world)]
        for p, gs in zip(net.parameters(), zip(*per_rank)):
            p.grad = sum(gs) / world
        opt.step(lr)
        grads(alone, 0, step)
        alone_opt.step(lr)
    return [p.detach().numpy() for p in net.parameters()], [p.detach().numpy() for p in alone.parameters()]


def test_ddp_exact(tmp, data):
    # The accuracy bars of test_runs pass with a broken all-reduce (each rank alone learns too):
    # DDP's model must be the average-gradient model, to rounding.
    steps, hidden, seed = 6, [32], 5
    saved = os.path.join(tmp, "ddp-exact.npz")
    records = run_ranks(tmp, "ddp-exact", ["--hidden", "32", "--batch-size", "32", "--lr", "0.05",
                                           "--momentum", "0.9", "--seed", str(seed), "--steps", str(steps),
                                           "--eval-every", "3", "--save-params", saved])
    check_records("ddp-exact", records, "ddp", steps, 3)
    check_against_reference("ddp", saved, *ddp_reference(data, hidden, 32, 0.05, seed, steps),
                            "ddp over 2 gloo ranks = the average-gradient model", steps)


def check_against_reference(name, saved, expected, alone, what, steps):
    """The parameters rank 0 saved equal `expected` to rounding, and the check can fail: `alone`
    (one rank that never communicated) is far from them."""
    with np.load(saved) as f:
        got = [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]
    worst = max(float(np.abs(g - e).max()) for g, e in zip(got, expected))
    apart = max(float(np.abs(a - e).max()) for a, e in zip(alone, expected))
    check(len(got) == len(expected) and worst < 1e-5,
          f"{what} (max |difference| {worst:.2e} after {steps} steps)")
    check(apart > 100 * max(worst, 1e-7), f"{name}: the comparison can fail (one rank alone differs by {apart:.2e})")


def test_diloco_runs(tmp, data):
    # H = 1, outer lr 1, outer momentum 0: theta_outer <- theta_outer - mean(theta_outer - theta_r)
    # = mean(theta_r) after every step, i.e. synchronous local SGD with parameter averaging.
    steps, hidden, seed = 6, [32], 5
    saved = os.path.join(tmp, "h1.npz")
    records = run_ranks(tmp, "diloco-h1", ["--algo", "diloco", "--diloco-h", "1", "--outer-lr", "1.0",
                                           "--outer-momentum", "0", "--hidden", "32", "--batch-size", "32",
                                           "--lr", "0.05", "--momentum", "0.9", "--seed", str(seed),
                                           "--steps", str(steps), "--eval-every", "3", "--save-params", saved],
                        tag="[diloco")
    check_records("diloco-h1", records, "diloco", steps, 3)
    check_against_reference("diloco H=1", saved, *local_sgd_reference(data, hidden, 32, 0.05, seed, steps),
                            "diloco H=1, outer lr 1, momentum 0 = local SGD averaging over 2 gloo ranks", steps)

    # The published outer optimizer (lr 0.7, Nesterov momentum 0.9), H = 10: 60 inner steps, 6 outer.
    measured = os.geteuid() == 0 and subprocess.run(
        ["unshare", "--net", "--mount", "true"], capture_output=True).returncode == 0
    wrap = (["unshare", "--net", "--mount", "sh", "-c"], "mount -t sysfs none /sys; ip link set lo up") \
        if measured else None
    extra = ["--algo", "diloco", "--diloco-h", "10", "--hidden", "64", "--batch-size", "32", "--lr", "0.05",
             "--momentum", "0.9", "--seed", "3", "--steps", "60", "--eval-every", "5"]
    records = run_ranks(tmp, "diloco", extra + (["--ifname", "lo"] if measured else []), wrap=wrap, tag="[diloco")
    # --eval-every 5 < H: theta_outer changes once per outer step, and is evaluated only there.
    evals, final = check_records("diloco", records, "diloco", 60, 10)
    check(final["test_accuracy"] > 0.5,
          f"diloco: test accuracy of theta_outer after 60 inner steps {final['test_accuracy']:.3f} > 0.5 (chance 0.1)")
    check([r["outer_steps"] for r in evals] == [1, 2, 3, 4, 5, 6],
          "diloco: one outer step per 10 inner steps, one evaluation per outer step")
    st = final["settings"]
    check(st["diloco_h"] == 10 and st["outer_lr"] == 0.7 and st["outer_momentum"] == 0.9 and st["outer_nesterov"],
          "diloco: H and the outer optimizer recorded in the settings")
    model = ddp.make_mlp(784, [64], 10, seed=3)
    per_outer = ddp.allreduce_bytes_per_step([tuple(p.shape) for p in model.parameters()], 2)
    if measured:
        ratio = final["bytes_sent_per_peer"] / (2 * 6 * per_outer)
        check("bytes_estimated" not in final and 1.0 <= ratio < 1.3,
              f"diloco: measured lo tx bytes / (2 ranks x 6 outer all-reduces) = {ratio:.3f} in [1, 1.3)")
    else:
        check(final.get("bytes_estimated") is True and close(final["bytes_sent_per_peer"], 6 * per_outer, 1e-9),
              "diloco: estimated bytes = one ring all-reduce of the model per outer step")
    check(final["bucket_bytes"] == [4 * sum(p.numel() for p in model.parameters())],
          "diloco: one flat pseudo-gradient per outer step")
    bad = subprocess.run([PYTHON, SCRIPT, "--rank", "0", "--world-size", "1", "--master-addr", "127.0.0.1",
                          "--master-port", "1", "--algo", "diloco", "--hook", "powersgd"],
                         capture_output=True, text=True)
    check(bad.returncode == 2 and "--hook must be none" in bad.stderr, "diloco: --hook powersgd refused")


def test_config_run(tmp):
    # ring8's own values (lr 0.02, batch 64, hidden [128], 2000 rounds); stop at a target accuracy.
    config = os.path.join(SOURCE, "configs", "ring8.yaml")
    records = run_ranks(tmp, "config", ["--config", config, "--eval-every", "5", "--target-accuracy", "0.6",
                                        "--stop-at-target"])
    final = records[-1]
    s = final.get("settings", {})
    check(s.get("lr") == 0.02 and s.get("batch_size") == 64 and s.get("hidden") == [128] and s.get("steps") == 2000,
          f"config run: ring8.yaml's optimizer and workload values used ({s.get('lr')}, {s.get('batch_size')}, "
          f"{s.get('hidden')}, {s.get('steps')})")
    hit = [r for r in records if not r.get("final") and r["test_accuracy"] >= 0.6]
    check(final.get("stopped_early") and len(hit) == 1 and final["step"] == hit[0]["step"] < 2000,
          f"config run: both ranks stop at the first evaluation >= 0.6 (step {final.get('step')})")
    check(final.get("time_to_target") == hit[0]["wall_s"] if hit else False, "config run: time_to_target recorded")


def test_orchestrator_grid():
    """time-to-accuracy's system variants: DDP's (batch, lr) grid, DiLoCo's H, CHOCO's step."""
    from importlib.machinery import SourceFileLoader
    tta = SourceFileLoader("tta", os.path.join(SOURCE, "tools", "bench", "time-to-accuracy")).load_module()
    v = tta.expand_systems(["choco-sign", "ddp", "ddp-powersgd", "diloco"], [25], [], [32, 128], [0.05])
    check(v == [("choco-sign", "choco-sign", (None, 32)), ("ddp-b32", "ddp", (32, 0.05)), ("ddp-b128", "ddp", (128, 0.05)),
                ("ddp-powersgd-b32", "ddp-powersgd", (32, 0.05)),
                ("ddp-powersgd-b128", "ddp-powersgd", (128, 0.05)), ("diloco", "diloco", 25)],
          "orchestrator: one ddp / ddp-powersgd system per batch of --ddp-batch, the others as before")
    v = tta.expand_systems(["ddp"], [25], [], [64], [0.05, 0.2])
    check(v == [("ddp-lr0.05", "ddp", (64, 0.05)), ("ddp-lr0.2", "ddp", (64, 0.2))],
          "orchestrator: one ddp system per lr of --ddp-lr; a single batch keeps the name")
    check(tta.expand_systems(["ddp"], [25]) == [("ddp", "ddp", (32, 0.05))],
          "orchestrator: ddp defaults to batch 32 per rank and lr 0.05, as the Grapevine systems")
    v = tta.expand_systems(["choco-sign", "dpsgd"], [25], [0.1, 0.4], batches=[32, 64])
    check(v == [("choco-sign-g0.1-b32", "choco-sign", (0.1, 32)), ("choco-sign-g0.1-b64", "choco-sign", (0.1, 64)),
                ("choco-sign-g0.4-b32", "choco-sign", (0.4, 32)), ("choco-sign-g0.4-b64", "choco-sign", (0.4, 64)),
                ("dpsgd-b32", "dpsgd", (None, 32)), ("dpsgd-b64", "dpsgd", (None, 64))],
          "orchestrator: a Grapevine system per (consensus step, batch); D-PSGD has no step")
    check(tta.expand_systems(["choco-top1"], [25], [0.2]) == [("choco-top1", "choco-top1", (0.2, 32))],
          "orchestrator: a single --gamma value keeps the system's name")
    check(tta.expand_systems(["torch-choco-sign"], [25], [0.1, 0.2], batches=[64]) ==
          [("torch-choco-sign-g0.1", "torch-choco-sign", (0.1, 64)),
           ("torch-choco-sign-g0.2", "torch-choco-sign", (0.2, 64))],
          "orchestrator: the PyTorch-API system takes the CHOCO steps and batches as choco-sign")
    v = tta.expand_systems(["choco-sign", "torch-choco-sign"], [25], [], batches=[64], local_steps=[1, 4])
    check(v == [("choco-sign-h1", "choco-sign", (None, 64)), ("choco-sign-h4", "choco-sign", (None, 64, 4)),
                ("torch-choco-sign", "torch-choco-sign", (None, 64))],
          "orchestrator: a Grapevine system per --local-steps value; the PyTorch-API system takes 1")
    check(tta.expand_systems(["choco-sign"], [25], [], batches=[64], local_steps=[2]) ==
          [("choco-sign", "choco-sign", (None, 64, 2))],
          "orchestrator: a single --local-steps value keeps the system's name")
    all_default = {"batch": True, "local_steps": True, "ddp_batch": True, "diloco_h": True}
    check(tta.profile_params("20mbit", "choco-sign", (None, 64), all_default) == (None, 128, 4)
          and tta.profile_params("20mbit", "torch-choco-sign", (0.1, 64), all_default) == (0.1, 128)
          and tta.profile_params("20mbit", "ddp", (256, 0.05), all_default) == (1024, 0.05)
          and tta.profile_params("20mbit", "diloco", 25, all_default) == 50
          and tta.profile_params("100mbit", "diloco", 25, all_default) == 25
          and tta.profile_params("100mbit", "choco-sign", (None, 64), all_default) == (None, 128, 4)
          and tta.profile_params("100mbit", "torch-choco-sign", (None, 64), all_default) == (None, 64)
          and tta.profile_params("100mbit", "ddp", (256, 0.05), all_default) == (256, 0.05)
          and tta.profile_params("1gbit", "choco-sign", (None, 64), all_default) == (None, 64),
          "orchestrator: each profile's tuned batch, local steps and DDP batch are its defaults")
    check(tta.profile_params("20mbit", "choco-sign", (None, 32, 2), {"batch": False, "local_steps": False,
                                                                     "ddp_batch": True}) == (None, 32, 2)
          and tta.profile_params("20mbit", "ddp", (64, 0.05), {"ddp_batch": False}) == (64, 0.05)
          and tta.profile_params("20mbit", "diloco", 10, {"diloco_h": False}) == 10,
          "orchestrator: a value given on the command line wins over a profile's tuned default")
    check(tta.TORCH_SYSTEMS["torch-choco-sign"] in tta.GRAPEVINE_SYSTEMS,
          "orchestrator: the PyTorch-API system runs a built-in system's algorithm")


def test_torch_peer(tmp, grapevine):
    """tools/bench/torch_peer.py (the benchmark's torch-choco-sign system): the built-in MLP's
    layout; 2 peers through `grapevine launch -- ...` and the PyTorch API; records and snapshots at
    every evaluation round; --evaluate-snapshots evaluates the exact average of the snapshots."""
    script = os.path.join(SOURCE, "tools", "bench", "torch_peer.py")
    sys.path.insert(0, os.path.dirname(script))
    import torch_peer  # noqa: E402
    check(sum(p.numel() for p in torch_peer.MLP([1024, 256]).parameters()) == 1068810,
          "torch_peer: the benchmark MLP has the built-in model's 1068810 parameters")
    names = [n for n, _ in torch_peer.MLP([16]).named_parameters()]
    check(names == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"],
          "torch_peer: weight then bias per layer, the built-in layout")
    if not grapevine:
        print("note  torch_peer run skipped: no --grapevine binary given")
        return
    out = os.path.join(tmp, "torch-peer")
    cfg = os.path.join(tmp, "torch-peer.yaml")
    with open(cfg, "w") as f:
        f.write("run: { seed: 2, rounds: 120 }\n"
                f"peers: {{ count: 2, host: 127.0.0.1, base_port: {free_port()} }}\n"
                "topology: { kind: ring }\ntransport: { backend: tcp }\n"
                "algorithm: { name: choco, consensus_step: 0.2, overlap: true }\n"
                "compression: { method: sign }\n"
                "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, schedule: constant }\n"
                "workload: { name: external }\n")
    r = subprocess.run([grapevine, "launch", cfg, "--out", out, "--quiet", "--", PYTHON, script, "--hidden", "16",
                        "--batch", "32", "--eval-every", "40", "--seed", "2"], capture_output=True, text=True,
                       timeout=300)
    check(r.returncode == 0, f"torch_peer: launch exits 0 ({r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]})")
    recs = {}
    for rank in range(2):
        path = os.path.join(out, f"torch-peer-{rank}.jsonl")
        recs[rank] = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    check(all([j["round"] for j in recs[k]] == [40, 80, 120] for k in recs),
          "torch_peer: each peer records rounds 40, 80 and 120")
    check(all(recs[k] and 0 < recs[k][0]["train_seconds"] < recs[k][-1]["train_seconds"] for k in recs),
          "torch_peer: training time grows from record to record")
    acc = [recs[k][-1]["test_accuracy"] for k in recs if recs[k]]
    check(len(acc) == 2 and min(acc) > 0.6, f"torch_peer: both peers above 60% after 120 rounds ({acc})")
    snaps = os.path.join(out, "snapshots")
    r = subprocess.run([PYTHON, script, "--evaluate-snapshots", snaps, "--peers", "2", "--hidden", "16"],
                       capture_output=True, text=True, timeout=120)
    evals = [json.loads(line) for line in r.stdout.splitlines()]
    check([e["round"] for e in evals] == [40, 80, 120], f"torch_peer: the average evaluated at 40, 80, 120 ({r.stderr[-200:]})")
    a = np.load(os.path.join(snaps, "peer-0-round-80.npy"))
    b = np.load(os.path.join(snaps, "peer-1-round-80.npy"))
    check(a.dtype == np.float32 and a.size == 784 * 16 + 16 + 16 * 10 + 10 and not np.array_equal(a, b),
          "torch_peer: the snapshots are the peers' own float32 parameters (apart before the end)")
    model = torch_peer.MLP([16])
    torch_peer.load_flat(model, ((a.astype(np.float64) + b) / 2).astype(np.float32))
    _, _, test_x, test_y = torch_peer.load(torch_peer.DEFAULT_DATA)
    want = torch_peer.accuracy(model, test_x, test_y)
    got = [e["accuracy"] for e in evals if e["round"] == 80]
    check(got == [want], f"torch_peer: the round-80 evaluation is the average's accuracy ({got} against {want})")


def main():
    grapevine = None
    if len(sys.argv) == 3 and sys.argv[1] == "--grapevine":
        grapevine = sys.argv[2]
    if not os.path.isdir(ddp.DEFAULT_DATA_DIR):
        exit_missing("ddp_baseline_test.py", "dataset",
                     f"{ddp.DEFAULT_DATA_DIR} missing (Debian package dataset-fashion-mnist, tools/install-deps)")
    data = ddp.load_fashion_mnist(ddp.DEFAULT_DATA_DIR)
    test_schedule()
    test_orchestrator_grid()
    test_data_and_partition(data[0], data[1])
    test_model()
    test_optimizer()
    test_config(grapevine)
    test_outer_step()
    with tempfile.TemporaryDirectory() as tmp:
        test_runs(tmp)
        test_ddp_exact(tmp, data)
        test_diloco_runs(tmp, data)
        test_config_run(tmp)
        test_torch_peer(tmp, grapevine)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
