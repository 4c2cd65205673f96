#!/usr/bin/python3
"""A byte-level GPT trained by gossip on dictionary text: one process per peer.

    grapevine launch examples/gpt/gpt.yaml -- /usr/bin/python3 examples/gpt/train.py

The text is GNU's Collaborative International Dictionary of English (Debian's dict-gcide,
/usr/share/dictd/gcide.dict.dz, installed by tools/install-deps); the last 5% of it is held out
for the validation loss. Each peer trains on its own contiguous shard of the rest. What a transformer
user expects: weight tying, AdamW, linear warm-up then cosine decay (a torch LambdaLR on the
optimizer), resumable (`grapevine launch ... --resume -- ...` continues from the checkpoints of
checkpoint.every, AdamW state and schedule included), Ctrl-C safe, optional bfloat16 parameters.

Options: --layers, --dim, --heads, --context, --batch (model and batch), --lr, --warmup,
--text-mb (how much of the dictionary to read), --eval-every, --eval-batches, --bf16.
"""

import argparse
import gzip
import math
import os

import torch
import torch.nn.functional as F

import grapevine.torch

TEXT = "/usr/share/dictd/gcide.dict.dz"  # dictzip: gzip with an index, readable by gzip


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    """Bytes in, next-byte logits out; the output layer is the token embedding (tied)."""

    def __init__(self, layers, dim, heads, context):
        super().__init__()
        self.tok = torch.nn.Embedding(256, dim)
        self.pos = torch.nn.Parameter(torch.zeros(context, dim))
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, 256, bias=False)
        self.head.weight = self.tok.weight  # weight tying: one tensor, registered once
        torch.nn.init.normal_(self.tok.weight, std=0.02)
        torch.nn.init.normal_(self.pos, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def load_text(megabytes):
    if not os.path.exists(TEXT):
        raise SystemExit(f"{TEXT} is missing: install Debian's dict-gcide (tools/install-deps)")
    with gzip.open(TEXT, "rb") as f:
        data = f.read(int(megabytes * 1e6))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)  # widened per batch: 8x less


def batch(text, context, size, generator):
    starts = torch.randint(0, len(text) - context - 1, (size,), generator=generator)
    x = torch.stack([text[s:s + context] for s in starts]).long()
    y = torch.stack([text[s + 1:s + context + 1] for s in starts]).long()
    return x, y


@torch.no_grad()
def validation_loss(model, val, context, batches, size):
    g = torch.Generator().manual_seed(12345)  # the same held-out batches on every peer, every time
    total = 0.0
    for _ in range(batches):
        x, y = batch(val, context, size, g)
        total += F.cross_entropy(model(x).float().view(-1, 256), y.view(-1)).item()
    return total / batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50, help="warm-up rounds")
    ap.add_argument("--text-mb", type=float, default=20.0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--bf16", action="store_true", help="bfloat16 parameters (fp32 masters)")
    args = ap.parse_args()

    rank = int(os.environ.get("GRAPEVINE_RANK", "0"))
    world = int(os.environ.get("GRAPEVINE_WORLD_SIZE", "1"))
    torch.manual_seed(1)  # one initial model (rank 0's is adopted anyway)
    text = load_text(args.text_mb)
    split = int(len(text) * 0.95)
    train, val = text[:split], text[split:]
    shard = len(train) // world
    mine = train[rank * shard:(rank + 1) * shard]

    model = GPT(args.layers, args.dim, args.heads, args.context)
    if args.bf16:
        model = model.bfloat16()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    adamw = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=args.lr, betas=(0.9, 0.95))
    opt = grapevine.torch.DecentralizedOptimizer(model, adamw)
    total = opt.planned_rounds

    def schedule(step):  # LambdaLR's step counts rounds from 0
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, total - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    for group in adamw.param_groups:
        group.setdefault("initial_lr", group["lr"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule, last_epoch=opt.start_round - 1)
    params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"GPT: {params / 1e6:.2f} M parameters, {args.layers} layers, dim {args.dim}, "
              f"context {args.context}; {len(mine) / 1e6:.1f} MB of text per peer, "
              f"{len(val) / 1e6:.1f} MB held out; rounds {opt.start_round}..{total}", flush=True)
    g = torch.Generator().manual_seed(1000 + rank)
    val_loss = float("nan")
    with opt:
        for t in range(opt.start_round, total):
            g.manual_seed(1000 * (rank + 1) + t)  # the round's batch: resumable exactly
            x, y = batch(mine, args.context, args.batch, g)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x).float().view(-1, 256), y.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step(loss=loss)
            sched.step()
            if (t + 1) % args.eval_every == 0 or t + 1 == total:
                val_loss = validation_loss(model, val, args.context, args.eval_batches,
                                           args.batch)
                opt.report(test_loss=val_loss)
                if rank == 0:
                    print(f"round {t + 1}: train loss {loss.item():.3f}, validation loss "
                          f"{val_loss:.3f}", flush=True)
    averaged = validation_loss(model, val, args.context, args.eval_batches, args.batch)
    print(f"peer {rank}: validation loss {val_loss:.4f} (own model), {averaged:.4f} "
          "(averaged model)", flush=True)


if __name__ == "__main__":
    main()
