#!/usr/bin/python3
"""PyTorch DistributedDataParallel and DiLoCo baselines for Grapevine's time-to-accuracy benchmark.

One process per rank (the benchmark starts each one, usually under `ip netns exec <ns>`):

  /usr/bin/python3 tools/bench/ddp_baseline.py --rank R --world-size N --master-addr A --master-port P \
      [--config CONFIG.yaml] [--hidden 1024,256] [--batch-size B] [--lr X] ... [--out FILE.jsonl] \
      [--algo diloco --diloco-h H --outer-lr 0.7 --outer-momentum 0.9]

It trains the same model as Grapevine's `workload.name: fashion-mnist-mlp` with the same data
normalisation, iid (or Dirichlet) shards, per-rank batch size, optimizer formulas and lr schedule
(runtime/train/{network,dataset,partition,optimizer}.cc, runtime/engine/setup.cc), but with exact
gradient averaging (gloo all-reduce, optionally PowerSGD-compressed) instead of gossip.

`--algo diloco` (Douillard et al. 2023, "DiLoCo"; OpenDiLoCo's recipe): no gradient all-reduce; every
rank takes H inner steps with the same optimizer, then the ranks all-reduce (average) the
pseudo-gradient delta = theta_outer - theta_local and apply outer Nesterov SGD to theta_outer (lr 0.7,
momentum 0.9 as published); every rank restarts from the new theta_outer and keeps its own inner
optimizer state. Steps and evaluations count inner steps (the same grid as DDP's); rank 0 evaluates
theta_outer, the model a user would deploy.

Clock: `wall_s` is training time only. At each evaluation every rank stops its clock, rank 0
evaluates the full test set and the ranks exchange their counters and the stop decision with two
tiny collectives, then the clocks resume. Grapevine's engine (runtime/engine/driver.cc) instead
evaluates inline on every peer and keeps its clock running; `eval_s` (total evaluation pause) and
`wall_incl_eval_s` are reported too so the orchestrator can compare either way.

Only the system interpreter (/usr/bin/python3) sees Debian's python3-torch; nothing is pip-installed.
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"

# The config keys this baseline reads, with Grapevine's defaults (runtime/config/schema.cc,
# docs/config.md). Precedence as in Grapevine: defaults < YAML < GRAPEVINE_* environment < flags.
CONFIG_DEFAULTS = {
    "run.seed": 1,
    "run.rounds": 1000,
    "algorithm.local_steps": 1,
    "optimizer.lr": 0.1,
    "optimizer.momentum": 0.9,
    "optimizer.nesterov": True,
    "optimizer.momentum_kind": "local",
    "optimizer.batch_size": 64,
    "optimizer.schedule": "constant",
    "optimizer.warmup_rounds": 0,
    "optimizer.weight_decay": 0.0,
    "optimizer.step_milestones": [],
    "optimizer.step_gamma": 0.1,
    "optimizer.min_lr": 0.0,
    "workload.name": "fashion-mnist-mlp",
    "workload.hidden": [128],
    "workload.partition": "iid",
    "workload.alpha": 0.5,
    "workload.data_dir": DEFAULT_DATA_DIR,
    "workload.eval_every": 100,
}


# ---- configuration ---------------------------------------------------------------------------

def env_name(key):
    return "GRAPEVINE_" + key.upper().replace(".", "_")


def load_config(path, environ=None):
    """Effective values of CONFIG_DEFAULTS' keys: defaults < YAML file (if any) < environment."""
    import yaml  # python3-yaml; only needed with --config or GRAPEVINE_* variables

    values = dict(CONFIG_DEFAULTS)
    if path:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: the top level must be a mapping of sections")
        for key in CONFIG_DEFAULTS:
            section, name = key.split(".", 1)
            body = doc.get(section)
            if isinstance(body, dict) and name in body:
                values[key] = body[name]
    environ = os.environ if environ is None else environ
    for key in CONFIG_DEFAULTS:
        text = environ.get(env_name(key))
        if text is not None:
            values[key] = yaml.safe_load(text)  # as Grapevine's loader: the text is parsed as YAML
    return values


def parse_int_list(text):
    return [int(v) for v in text.split(",") if v.strip() != ""]


# ---- lr schedule (runtime/train/optimizer.cc, LrSchedule::at) --------------------------------

class LrSchedule:
    def __init__(self, kind, lr, total_rounds, warmup_rounds=0, min_lr=0.0, milestones=(), gamma=0.1):
        if kind not in ("constant", "cosine", "step"):
            raise ValueError(f"optimizer.schedule must be constant, cosine or step, got {kind!r}")
        if kind == "cosine" and total_rounds <= warmup_rounds:
            raise ValueError("the cosine schedule needs total rounds > optimizer.warmup_rounds")
        if kind == "step" and not milestones:
            raise ValueError("the step schedule needs optimizer.step_milestones")
        self.kind, self.lr, self.total = kind, float(lr), int(total_rounds)
        self.warmup, self.min_lr = int(warmup_rounds), float(min_lr)
        self.milestones, self.gamma = sorted(int(m) for m in milestones), float(gamma)

    def at(self, round_):
        round_ = max(int(round_), 0)
        if round_ < self.warmup:
            return self.lr * (round_ + 1) / self.warmup
        if self.kind == "constant":
            return self.lr
        if self.kind == "cosine":
            t = round_ - self.warmup
            span = self.total - self.warmup
            if span <= 0 or t >= span:
                return self.min_lr
            return self.min_lr + (self.lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * t / span))
        passed = sum(1 for m in self.milestones if m <= round_)
        return self.lr * self.gamma ** passed


# ---- data (runtime/train/dataset.cc, partition.cc) -------------------------------------------

def read_idx(path):
    """An IDX file (optionally gzip-compressed) of unsigned bytes as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"IDX file {path}: bad magic (need unsigned-byte IDX)")
    ndims = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * d: 8 + 4 * d], "big") for d in range(ndims)]
    offset = 4 + 4 * ndims
    if len(raw) - offset != int(np.prod(dims)):
        raise ValueError(f"IDX file {path}: payload has {len(raw) - offset} bytes, dims {dims}")
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims)


def idx_path(data_dir, stem):
    gz = os.path.join(data_dir, stem + ".gz")
    return gz if os.path.exists(gz) else os.path.join(data_dir, stem)


def load_fashion_mnist(data_dir):
    """(train_images [60000, 784] uint8, train_labels, test_images [10000, 784], test_labels)."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"Fashion-MNIST directory {data_dir} does not exist: install the "
                                "Debian package 'dataset-fashion-mnist' (tools/install-deps)")
    parts = []
    for images, labels in (("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                           ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")):
        x = read_idx(idx_path(data_dir, images))
        y = read_idx(idx_path(data_dir, labels))
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise ValueError(f"{data_dir}: {images} and {labels} do not match")
        parts += [x.reshape(x.shape[0], -1), y.astype(np.int64)]
    return tuple(parts)


def pixel_table(train_images):
    """uint8 pixel -> standardised float, with the training set's mean and population deviation of
    pixel/255 (Grapevine's loadSharedData: one table for train and test)."""
    histogram = np.bincount(train_images.ravel(), minlength=256).astype(np.float64)
    v = np.arange(256, dtype=np.float64) / 255.0
    n = histogram.sum()
    mean = (histogram * v).sum() / n
    std = math.sqrt(max((histogram * v * v).sum() / n - mean * mean, 1e-12))
    return ((v - mean) / std).astype(np.float32)


def iid_partition(n, peers, seed):
    """A seeded shuffle of [0, n) cut into `peers` contiguous pieces; the first n % peers get one
    extra (sizes as Grapevine's iidPartition; the shuffle stream differs). Each shard ascending."""
    if peers < 1 or n < peers:
        raise ValueError(f"iid partition: {n} samples cannot fill {peers} shards")
    order = np.random.default_rng([int(seed), 0x1D1D]).permutation(n)
    base, extra = divmod(n, peers)
    shards, pos = [], 0
    for p in range(peers):
        size = base + (1 if p < extra else 0)
        shards.append(np.sort(order[pos:pos + size]))
        pos += size
    return shards


def dirichlet_partition(labels, classes, peers, alpha, seed):
    """Label skew as Grapevine's dirichletPartition: per class, proportions ~ Dir(alpha) over peers
    cut the class's shuffled samples; a draw leaving a shard empty is redrawn (1000 tries)."""
    rng = np.random.default_rng([int(seed), 0xD1C1])
    by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in range(classes)]
    for _ in range(1000):
        shards = [[] for _ in range(peers)]
        for members in by_class:
            p = rng.gamma(alpha, size=peers)
            total = p.sum()
            if not total > 0:
                shards[int(rng.integers(peers))].append(members)
                continue
            cuts = np.minimum(len(members), np.rint(np.cumsum(p) / total * len(members)).astype(np.int64))
            cuts[-1] = len(members)
            begin = 0
            for r in range(peers):
                if cuts[r] > begin:
                    shards[r].append(members[begin:cuts[r]])
                    begin = int(cuts[r])
        if all(shard for shard in shards):
            return [np.sort(np.concatenate(s)) for s in shards]
    raise ValueError(f"dirichlet partition: alpha {alpha} left some of the {peers} shards empty")


class BatchStream:
    """Rank `rank`'s endless minibatch stream, as Grapevine's ClassifierWorkload: sample position
    p = step * batch + j; epoch e = p // len(shard) visits the shard in a permutation seeded by
    (seed, rank, e), so each epoch sees every sample of the shard exactly once."""

    def __init__(self, shard, batch, seed, rank):
        self.shard, self.batch, self.seed, self.rank = shard, batch, int(seed), int(rank)
        self.epoch, self.order = -1, None

    def _position(self, p):
        n = len(self.shard)
        epoch = p // n
        if epoch != self.epoch:
            rng = np.random.default_rng([self.seed, 0xBA7C, self.rank, epoch])
            self.order, self.epoch = rng.permutation(n), epoch
        return self.order[p % n]

    def indices(self, step):
        first = step * self.batch
        return self.shard[[self._position(first + j) for j in range(self.batch)]]


# ---- model and optimizer (runtime/train/network.cc, optimizer.cc) ----------------------------

def make_mlp(inputs, hidden, classes, seed):
    """Dense + ReLU per hidden size, then Dense to the classes (logits; the loss is softmax
    cross-entropy). Init as Grapevine: He-uniform (bound sqrt(6 / fan_in)) for the layers followed by
    ReLU, Glorot-uniform (sqrt(6 / (fan_in + fan_out))) for the output layer, zero biases."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    layers, width = [], inputs
    sizes = list(hidden) + [classes]
    for i, out in enumerate(sizes):
        dense = torch.nn.Linear(width, out)
        output = i + 1 == len(sizes)
        bound = math.sqrt(6.0 / (width + out)) if output else math.sqrt(6.0 / width)
        with torch.no_grad():
            dense.weight.uniform_(-bound, bound, generator=gen)
            dense.bias.zero_()
        layers.append(dense)
        if not output:
            layers.append(torch.nn.ReLU())
        width = out
    return torch.nn.Sequential(*layers)


class GrapevineSgd:
    """Grapevine's Optimizer::direction, then x <- x - lr * u, in float32 (g' = g + wd * x):
      local:        m <- beta * m + g';  u = m (heavy ball) or u = g' + beta * m (Nesterov)
                    (identical to torch.optim.SGD with dampening 0)
      quasi-global: u = g' + beta * mhat (or g' + beta * (beta * mhat + g')); with exact averaging
                    the mixing step is the identity, so d = (x_before - x_after) / lr = u and
                    mhat <- beta * mhat + (1 - beta) * u."""

    def __init__(self, params, momentum, nesterov, weight_decay, kind="local"):
        import torch

        if kind not in ("local", "quasi-global"):
            raise ValueError(f"optimizer.momentum_kind must be local or quasi-global, got {kind!r}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"optimizer.momentum must be in [0, 1), got {momentum}")
        if nesterov and momentum == 0.0:
            raise ValueError("optimizer.nesterov needs optimizer.momentum > 0")
        self.params = list(params)
        self.beta, self.nesterov, self.wd, self.kind = float(momentum), bool(nesterov), float(weight_decay), kind
        self.buffers = [torch.zeros_like(p) for p in self.params] if self.beta > 0 else None

    def step(self, lr):
        import torch

        with torch.no_grad():
            for i, p in enumerate(self.params):
                g = p.grad if self.wd == 0.0 else p.grad + self.wd * p
                if self.buffers is None:
                    u = g
                elif self.kind == "local":
                    m = self.buffers[i]
                    m.mul_(self.beta).add_(g)
                    u = g + self.beta * m if self.nesterov else m
                else:
                    m = self.buffers[i]
                    u = g + self.beta * (self.beta * m + g) if self.nesterov else g + self.beta * m
                    m.mul_(self.beta).add_(u, alpha=1.0 - self.beta)
                p.add_(u, alpha=-lr)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


class OuterNesterov:
    """DiLoCo's outer optimizer on one flat float32 vector theta_outer, given the averaged
    pseudo-gradient delta = mean over ranks of (theta_outer - theta_local):
        m <- mu * m + delta;  u = delta + mu * m (Nesterov) or u = m;  theta_outer <- theta_outer - lr * u
    (torch.optim.SGD's formulas with dampening 0, which OpenDiLoCo applies to the pseudo-gradient).
    With lr 1 and mu 0 the new theta_outer is the plain average of the ranks' models (local SGD)."""

    def __init__(self, lr, momentum, nesterov=True):
        if not lr > 0.0:
            raise ValueError(f"--outer-lr must be > 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"--outer-momentum must be in [0, 1), got {momentum}")
        self.lr, self.mu, self.nesterov = float(lr), float(momentum), bool(nesterov) and momentum > 0.0
        self.buffer = None

    def step(self, outer, delta):
        """Updates `outer` in place (torch tensors of the same shape)."""
        if self.mu == 0.0:
            outer.add_(delta, alpha=-self.lr)
            return
        if self.buffer is None:
            self.buffer = delta.clone()  # m_0 = 0, so m_1 = delta
        else:
            self.buffer.mul_(self.mu).add_(delta)
        u = delta + self.mu * self.buffer if self.nesterov else self.buffer
        outer.add_(u, alpha=-self.lr)


# ---- communication accounting ----------------------------------------------------------------

def ring_bytes(nbytes, world):
    """Bytes one rank sends in a ring all-reduce of nbytes (gloo's CPU all-reduce is a ring)."""
    return 0 if world <= 1 else 2.0 * (world - 1) / world * nbytes


def allreduce_bytes_per_step(shapes, world, powersgd_rank=None, min_compression_rate=2.0):
    """Analytic bytes sent per rank for one step's gradient all-reduce (float32). With PowerSGD
    (after its start iteration): the uncompressed tensors (vectors, and matrices whose rank-r factors
    are not min_compression_rate times smaller, as PowerSGD's _should_compress decides) plus the P
    and Q factors, each all-reduced."""
    if powersgd_rank is None:
        return ring_bytes(4 * sum(int(np.prod(s)) for s in shapes), world)
    total = 0
    for s in shapes:
        if len(s) < 2:
            total += int(np.prod(s))
            continue
        rows, cols = s[0], int(np.prod(s[1:]))
        if (rows + cols) * powersgd_rank * min_compression_rate < rows * cols:
            total += (rows + cols) * powersgd_rank
        else:
            total += rows * cols
    return ring_bytes(4 * total, world)


def read_tx_bytes(ifname):
    with open(f"/sys/class/net/{ifname}/statistics/tx_bytes") as f:
        return int(f.read())


# ---- run -------------------------------------------------------------------------------------

def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--config", help="Grapevine YAML config: workload/optimizer/run values (flags override)")
    p.add_argument("--hidden", type=parse_int_list, help="MLP hidden sizes, e.g. 1024,256")
    p.add_argument("--batch-size", type=int, help="per-rank minibatch (optimizer.batch_size)")
    p.add_argument("--lr", type=float)
    p.add_argument("--momentum", type=float)
    p.add_argument("--nesterov", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--momentum-kind", choices=["local", "quasi-global"])
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--schedule", choices=["constant", "cosine", "step"])
    p.add_argument("--warmup-rounds", type=int)
    p.add_argument("--steps", type=int, help="training steps (default run.rounds * algorithm.local_steps)")
    p.add_argument("--eval-every", type=int, help="steps between evaluations (default workload.eval_every); "
                   "diloco: at the first outer step at or after each N steps (its model changes only there)")
    p.add_argument("--target-accuracy", type=float)
    p.add_argument("--stop-at-target", action="store_true", help="stop once --target-accuracy is reached")
    p.add_argument("--max-seconds", type=float, help="stop after this much training time (checked at evaluations)")
    p.add_argument("--algo", choices=["ddp", "diloco"], default="ddp",
                   help="ddp: gradient all-reduce every step; diloco: H local steps, then an outer step")
    p.add_argument("--diloco-h", type=int, default=20, help="DiLoCo: inner steps per outer step (H)")
    p.add_argument("--outer-lr", type=float, default=0.7, help="DiLoCo: outer learning rate")
    p.add_argument("--outer-momentum", type=float, default=0.9, help="DiLoCo: outer momentum")
    p.add_argument("--outer-nesterov", action=argparse.BooleanOptionalAction, default=True,
                   help="DiLoCo: Nesterov outer momentum")
    p.add_argument("--save-params", help="rank 0 writes the evaluated model's final parameters (.npz)")
    p.add_argument("--hook", choices=["none", "powersgd"], default="none")
    p.add_argument("--powersgd-rank", type=int, default=2)
    p.add_argument("--powersgd-start", type=int, default=10, help="PowerSGD's start_powerSGD_iter")
    p.add_argument("--seed", type=int, help="default run.seed")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of this rank")
    p.add_argument("--out", help="JSON lines output (rank 0); default stdout")
    p.add_argument("--ifname", help="count bytes from this interface's tx_bytes and bind gloo to it")
    p.add_argument("--data-dir", help="default workload.data_dir")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for rendezvous and each collective")
    return p


def resolve(args):
    """Effective settings: Grapevine's config (defaults < YAML < environment) < explicit flags."""
    env_set = any(env_name(k) in os.environ for k in CONFIG_DEFAULTS)
    c = load_config(args.config) if (args.config or env_set) else dict(CONFIG_DEFAULTS)
    if c["workload.name"] != "fashion-mnist-mlp":
        raise ValueError(f"workload.name {c['workload.name']!r}: this baseline runs fashion-mnist-mlp only")
    pick = lambda flag, key: flag if flag is not None else c[key]  # noqa: E731
    local_steps = int(c["algorithm.local_steps"])
    s = {
        "seed": int(pick(args.seed, "run.seed")),
        "hidden": [int(h) for h in pick(args.hidden, "workload.hidden")],
        "batch_size": int(pick(args.batch_size, "optimizer.batch_size")),
        "lr": float(pick(args.lr, "optimizer.lr")),
        "momentum": float(pick(args.momentum, "optimizer.momentum")),
        "nesterov": bool(pick(args.nesterov, "optimizer.nesterov")),
        "momentum_kind": pick(args.momentum_kind, "optimizer.momentum_kind"),
        "weight_decay": float(pick(args.weight_decay, "optimizer.weight_decay")),
        "schedule": pick(args.schedule, "optimizer.schedule"),
        "warmup_rounds": int(pick(args.warmup_rounds, "optimizer.warmup_rounds")),
        "min_lr": float(c["optimizer.min_lr"]),
        "milestones": [int(m) for m in c["optimizer.step_milestones"]],
        "gamma": float(c["optimizer.step_gamma"]),
        "partition": c["workload.partition"],
        "alpha": float(c["workload.alpha"]),
        "data_dir": pick(args.data_dir, "workload.data_dir"),
        "local_steps": local_steps,
        "steps": int(args.steps if args.steps is not None else int(c["run.rounds"]) * local_steps),
        "eval_every": int(pick(args.eval_every, "workload.eval_every")),
    }
    if s["momentum"] == 0.0:
        s["nesterov"] = False  # Grapevine rejects nesterov without momentum; a bare --momentum 0 means plain SGD
    if s["batch_size"] < 1 or s["steps"] < 1:
        raise ValueError("batch size and steps must be >= 1")
    if s["partition"] not in ("iid", "dirichlet"):
        raise ValueError(f"workload.partition must be iid or dirichlet, got {s['partition']!r}")
    if args.algo == "diloco":
        if args.hook != "none":
            raise ValueError("--algo diloco all-reduces pseudo-gradients, not gradients: --hook must be none")
        if args.diloco_h < 1:
            raise ValueError(f"--diloco-h must be >= 1, got {args.diloco_h}")
        OuterNesterov(args.outer_lr, args.outer_momentum)  # validates the outer settings
    return s


class Clock:
    """Training wall clock that can be paused around evaluations."""

    def __init__(self):
        self.start = time.perf_counter()
        self.paused_total = 0.0
        self.paused_at = None

    def pause(self):
        self.paused_at = time.perf_counter()

    def resume(self):
        self.paused_total += time.perf_counter() - self.paused_at
        self.paused_at = None

    def elapsed(self):
        now = self.paused_at if self.paused_at is not None else time.perf_counter()
        return now - self.start - self.paused_total

    def total(self):
        return time.perf_counter() - self.start


def evaluate(model, images, labels, table, batch=1000):
    import torch

    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(labels), batch):
            x = torch.from_numpy(table[images[start:start + batch]])
            y = torch.from_numpy(labels[start:start + batch])
            logits = model(x)
            loss_sum += torch.nn.functional.cross_entropy(logits, y, reduction="sum").item()
            correct += int((logits.argmax(dim=1) == y).sum())
    return correct / len(labels), loss_sum / len(labels)


class DiLoCo:
    """Rank-local DiLoCo state: theta_outer (a model of its own, the one rank 0 evaluates) and the
    outer optimizer. `sync` runs one outer step: all-reduce (sum, then / world) of the flat
    pseudo-gradient theta_outer - theta_local, the outer update, and theta_local <- theta_outer.
    The inner optimizer's state is left alone: each rank keeps its momentum across outer steps."""

    def __init__(self, model, outer_model, lr, momentum, nesterov, world):
        self.local = list(model.parameters())
        self.outer = list(outer_model.parameters())
        self.flat_outer = self._flat(self.outer)
        self.optimizer = OuterNesterov(lr, momentum, nesterov)
        self.world = world
        self.outer_steps = 0

    @staticmethod
    def _flat(params):
        import torch

        return torch.cat([p.detach().reshape(-1) for p in params])

    def sync(self):
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            delta = self.flat_outer - self._flat(self.local)
            dist.all_reduce(delta)  # one flat tensor: one ring all-reduce per outer step
            delta.div_(self.world)
            self.optimizer.step(self.flat_outer, delta)
            offset = 0
            for outer, local in zip(self.outer, self.local):
                n = outer.numel()
                outer.copy_(self.flat_outer[offset:offset + n].view_as(outer))
                local.copy_(outer)
                offset += n
        self.outer_steps += 1


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        s = resolve(args)
    except (ValueError, OSError, KeyError) as e:
        print(f"ddp_baseline: {e}", file=sys.stderr)
        return 2
    if args.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    import copy
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(args.threads)
    rank, world = args.rank, args.world_size
    diloco = args.algo == "diloco"
    system = "diloco" if diloco else "ddp-powersgd" if args.hook == "powersgd" else "ddp"

    train_x, train_y, test_x, test_y = load_fashion_mnist(s["data_dir"])
    table = pixel_table(train_x)
    if s["partition"] == "iid":
        shards = iid_partition(len(train_y), world, s["seed"])
    else:
        shards = dirichlet_partition(train_y, 10, world, s["alpha"], s["seed"])
    stream = BatchStream(shards[rank], s["batch_size"], s["seed"], rank)
    schedule = LrSchedule(s["schedule"], s["lr"], s["steps"] // s["local_steps"], s["warmup_rounds"],
                          s["min_lr"], s["milestones"], s["gamma"])

    dist.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{args.master_port}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    model = make_mlp(train_x.shape[1], s["hidden"], 10, s["seed"])
    shapes = [tuple(p.shape) for p in model.parameters()]
    params = sum(int(np.prod(sh)) for sh in shapes)
    outer = None
    if diloco:
        # As DDP does at construction: rank 0's parameters to every rank, so theta_outer is identical.
        with torch.no_grad():
            for p in model.parameters():
                dist.broadcast(p.data, src=0)
        outer_model = copy.deepcopy(model)
        outer = DiLoCo(model, outer_model, args.outer_lr, args.outer_momentum, args.outer_nesterov, world)
        net, eval_model = model, outer_model
    elif args.hook == "powersgd":
        # One gradient bucket. PowerSGD's hook issues its P and Q all-reduces from future callbacks;
        # with several buckets those callbacks race, so ranks can issue the collectives in different
        # orders and gloo pairs mismatched messages (seen at 8 ranks: "op.preamble.length <=
        # op.nbytes"). Plain DDP keeps its default buckets (backward/communication overlap).
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
        net = DDP(model, bucket_cap_mb=1 << 20)
        eval_model = model
    else:
        net = DDP(model)  # broadcasts rank 0's parameters: every replica starts identical
        eval_model = model
    if args.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                   start_powerSGD_iter=args.powersgd_start, warm_start=True,
                                   use_error_feedback=True, random_seed=s["seed"])
        net.register_comm_hook(state, psgd.powerSGD_hook)
    optimizer = GrapevineSgd(net.parameters(), s["momentum"], s["nesterov"], s["weight_decay"],
                             s["momentum_kind"])

    settings = {"system": system, "world_size": world, "parameters": params,
                "clock": "training only: evaluation and the metric collectives are excluded",
                "bytes_source": f"tx_bytes of {args.ifname}" if args.ifname else "estimated",
                "torch": torch.__version__, **s}
    if args.hook == "powersgd":
        settings.update(powersgd_rank=args.powersgd_rank, powersgd_start=args.powersgd_start)
    if diloco:
        settings.update(diloco_h=args.diloco_h, outer_lr=args.outer_lr, outer_momentum=args.outer_momentum,
                        outer_nesterov=outer.optimizer.nesterov,
                        evaluated_model="theta_outer (the model after the latest outer step)")
    out = (open(args.out, "w") if args.out else sys.stdout) if rank == 0 else None

    dense_step = allreduce_bytes_per_step(shapes, world)
    compressed_step = allreduce_bytes_per_step(shapes, world, args.powersgd_rank) \
        if args.hook == "powersgd" else dense_step
    estimated = 0.0
    tx_start = read_tx_bytes(args.ifname) if args.ifname else 0
    loss_sum, loss_count = 0.0, 0
    reached = {0.80: None, 0.85: None}
    if args.target_accuracy is not None:
        reached.setdefault(args.target_accuracy, None)
    last = None
    last_eval_step = 0
    dist.barrier()
    clock = Clock()
    step = 0
    while step < s["steps"]:
        idx = stream.indices(step)
        x = torch.from_numpy(table[train_x[idx]])
        y = torch.from_numpy(train_y[idx])
        loss = torch.nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces (averages) the gradients here; DiLoCo's inner step does not
        optimizer.step(schedule.at(step // s["local_steps"]))
        step += 1
        if diloco:
            # An outer step every H inner steps, and after the last one so no inner work is lost.
            if step % args.diloco_h == 0 or step == s["steps"]:
                outer.sync()
                estimated += dense_step  # the pseudo-gradient is as large as the gradient
        else:
            # PowerSGD's iteration counter counts all-reduces; it compresses from start_powerSGD_iter on.
            estimated += compressed_step if step - 1 >= args.powersgd_start else dense_step
        loss_sum += float(loss.item())
        loss_count += 1
        if diloco:
            # The evaluated model (theta_outer) changes only at an outer step: evaluate at the first
            # outer step at or after each point of the grid, never the same model twice.
            eval_now = step == s["steps"] or (
                step % args.diloco_h == 0 and s["eval_every"] > 0 and step - last_eval_step >= s["eval_every"])
        else:
            eval_now = (s["eval_every"] > 0 and step % s["eval_every"] == 0) or step == s["steps"]
        if not eval_now:
            continue
        last_eval_step = step
        clock.pause()
        wall = clock.elapsed()
        sent = (read_tx_bytes(args.ifname) - tx_start) if args.ifname else estimated
        counters = torch.tensor([float(sent), loss_sum, float(loss_count)], dtype=torch.float64)
        gathered = [torch.zeros_like(counters) for _ in range(world)]
        dist.all_gather(gathered, counters)
        loss_sum, loss_count = 0.0, 0
        stop = torch.zeros(1, dtype=torch.int32)
        if rank == 0:
            accuracy, test_loss = evaluate(eval_model, test_x, test_y, table)
            per_rank = [float(g[0]) for g in gathered]
            losses = sum(float(g[1]) for g in gathered) / max(1.0, sum(float(g[2]) for g in gathered))
            for target in reached:
                if reached[target] is None and accuracy >= target:
                    reached[target] = wall
            last = {"system": system, "step": step, "wall_s": wall, "test_accuracy": accuracy,
                    "test_loss": test_loss, "train_loss": losses,
                    "bytes_sent_per_peer": sum(per_rank) / world, "bytes_sent_max": max(per_rank),
                    "lr": schedule.at((step - 1) // s["local_steps"]),
                    "eval_s": clock.paused_total + (time.perf_counter() - clock.paused_at),
                    "wall_incl_eval_s": clock.total()}
            if diloco:
                last["outer_steps"] = outer.outer_steps
            if not args.ifname:
                last["bytes_estimated"] = True
            out.write(json.dumps(last) + "\n")
            out.flush()
            print(f"[{system}] step {step}/{s['steps']} wall {wall:.1f}s acc {accuracy:.4f} "
                  f"loss {losses:.4f} sent/peer {last['bytes_sent_per_peer'] / 1e6:.1f} MB",
                  file=sys.stderr, flush=True)
            target_hit = args.stop_at_target and args.target_accuracy is not None and accuracy >= args.target_accuracy
            time_up = args.max_seconds is not None and wall >= args.max_seconds
            stop[0] = 1 if (target_hit or time_up) else 0
        dist.broadcast(stop, src=0)  # every rank stops at the same step, or the next all-reduce hangs
        clock.resume()
        if int(stop[0]):
            break

    if diloco:
        bucket_bytes = [4 * params]  # the pseudo-gradient, all-reduced as one flat tensor
    else:
        logging_data = net._get_ddp_logging_data()
        buckets = logging_data.get("rebuilt_bucket_sizes") or logging_data.get("bucket_sizes", "")
        bucket_bytes = [int(b) for b in str(buckets).split(",") if b.strip()]
    if rank == 0:
        final = dict(last)
        final.update({"final": True, "steps": step, "stopped_early": step < s["steps"],
                      "time_to_80": reached[0.80], "time_to_85": reached[0.85],
                      "step_time_s": last["wall_s"] / max(step, 1),
                      "bucket_bytes": bucket_bytes, "settings": settings})
        if args.target_accuracy is not None:
            final["time_to_target"] = reached[args.target_accuracy]
            final["target_accuracy"] = args.target_accuracy
        out.write(json.dumps(final) + "\n")
        out.flush()
        if out is not sys.stdout:
            out.close()
        if args.save_params:
            np.savez(args.save_params, *[p.detach().numpy() for p in eval_model.parameters()])
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
