"""PyTorch integration: gossip training of any nn.Module with one wrapper around its optimizer.

    import grapevine.torch
    model = Net()
    opt = grapevine.torch.DecentralizedOptimizer(
        model.named_parameters(), torch.optim.SGD(model.parameters(), lr=0.05), config="run.yaml")
    with opt:                                   # finalize(average=True) at the end of the block
        for _ in range(opt.planned_rounds):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step(loss=loss.item())          # the torch step, then one gossip round
        opt.report(test_accuracy=evaluate(model))

Two ways to step (docs/api.md):
  optimizer=None       Grapevine's optimizer (optimizer.* of the config, every momentum kind) is
                       fed the parameters' .grad, then one gossip round: the engine's exact math;
  optimizer=<torch>    the wrapped optimizer (SGD, Adam, ...) steps, then one gossip round mixes the
                       parameters. Its momentum is then local momentum.

Memory: after the constructor every parameter's .data views Grapevine's own buffer (zero-copy: no
copy is made around a round). The views keep the Peer alive; finalize() gives each parameter its
own storage back, holding the final values.
"""

import os
import warnings

import torch

from . import FailedPreconditionError, GrapevineError, InvalidArgumentError, Peer

__all__ = ["DecentralizedOptimizer"]

# Parameter dtypes: float32 is trained in place (zero-copy); bfloat16 and float16 through an fp32
# master copy in Grapevine's buffer.
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _named(params):
    """[(name, parameter)] from parameters, (name, parameter) pairs or torch param-group dicts."""
    if isinstance(params, torch.Tensor):
        raise InvalidArgumentError(
            "params must be an iterable of tensors (e.g. model.parameters() or "
            "model.named_parameters()), not a single tensor"
        )
    out = []
    for item in params:
        if isinstance(item, dict):  # a torch param group
            group = item.get("params", [])
            group = [group] if isinstance(group, torch.Tensor) else list(group)
            out.extend((None, p) for p in group)
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
            out.append((item[0], item[1]))
        else:
            out.append((None, item))
    named = []
    for index, (name, p) in enumerate(out):
        if not isinstance(p, torch.Tensor):
            raise InvalidArgumentError(
                f"parameter {name or index} is a {type(p).__name__}, not a torch tensor")
        named.append((name if name is not None else f"param.{index}", p))
    return named


def _chosen_buffers(module, policy):
    """([names], [tensors]) of the module's buffers that `policy` gossips: "average" every
    floating-point buffer (BatchNorm's running mean and variance; integer ones such as
    num_batches_tracked stay local), "local" none, or an iterable of buffer names."""
    if isinstance(policy, str) and policy not in ("average", "local"):
        raise InvalidArgumentError(
            f"buffers={policy!r}: 'average' (every float buffer is mixed and averaged), 'local' "
            "(each peer keeps its own) or a list of buffer names")
    if module is None or policy == "local":
        return [], []
    available = dict(module.named_buffers())
    if policy == "average":
        chosen = [n for n, b in available.items() if b.dtype in _DTYPES]
    else:
        chosen = list(policy)
        for name in chosen:
            if name not in available:
                raise InvalidArgumentError(
                    f"buffers: the model has no buffer '{name}' (it has {sorted(available)})")
            if available[name].dtype not in _DTYPES:
                raise InvalidArgumentError(
                    f"buffer '{name}' has dtype {available[name].dtype}; only float32, bfloat16 "
                    "and float16 buffers can be averaged")
    names, tensors, seen = [], [], set()
    for name in chosen:
        b = available[name]
        if id(b) in seen or b.numel() == 0:
            continue
        if b.device.type != "cpu":
            raise InvalidArgumentError(f"buffer '{name}' is on {b.device}; CPU tensors only")
        seen.add(id(b))
        names.append("buffer." + name)
        tensors.append(b)
    return names, tensors


class DecentralizedOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer (or none) so that every step() ends with one gossip round.

    DecentralizedOptimizer(params, optimizer=None, config=None, rank=None, **overrides)
      params     the model (an nn.Module: its named parameters and, per `buffers`, its
                 buffers), model.parameters(), model.named_parameters() (names go into the
                 records) or param groups; parameters with requires_grad=False are skipped (not
                 gossiped); every other one must be a float32, bfloat16 or float16 CPU tensor
                 (the last two through an fp32 master copy: mixed in fp32, rounded once per
                 round), and each at most once;
      optimizer  a torch.optim.Optimizer over the same parameters, or None for Grapevine's own
                 (its lr: param_groups[0]["lr"] once something sets it, else optimizer.*'s
                 schedule);
      config     a YAML path, a dict ({"optimizer": {"lr": 0.05}, ...}), YAML text, or None for
                 $GRAPEVINE_CONFIG (set by `grapevine launch`); workload.name must be `external`;
      rank       None: from GRAPEVINE_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMIX_RANK;
      overrides  config keys with `__` for `.`: optimizer__lr=0.05, run__rounds=100; or
                 overrides={"optimizer.lr": 0.05}; out_dir= and incarnation= go to the Peer;
      resume     continue from the checkpoints (checkpoint.every); None: GRAPEVINE_RESUME=1
                 (`grapevine launch --resume ... -- COMMAND`) says;
      missing_grad  "skip": with optimizer=None a parameter whose .grad is None is left alone
                 (value and momentum), as torch does; "zero": a zero gradient;
      buffers    when params is the model: "average" (default: every float buffer, e.g.
                 BatchNorm's running statistics, is mixed every round and averaged by finalize,
                 so the deployable model is one model; never stepped), "local" (each peer keeps
                 its own) or a list of buffer names to average.
    The constructor connects to the neighbours (it blocks until every neighbour is there) and
    leaves every peer holding the lowest rank's parameter values, or, resumed, the checkpoint's
    (with the wrapped optimizer's state of the same round); `start_round` is then the round the
    loop continues at: `for t in range(opt.start_round, opt.planned_rounds)`.
    """

    def __init__(self, params, optimizer=None, config=None, rank=None, *, overrides=None,
                 out_dir=None, incarnation=0, resume=None, missing_grad="skip",
                 buffers="average", **kw_overrides):
        if missing_grad not in ("skip", "zero"):
            raise InvalidArgumentError(
                f"missing_grad={missing_grad!r}: 'skip' (a parameter whose .grad is None is left "
                "alone, as torch does) or 'zero' (it is a zero gradient)")
        module = params if isinstance(params, torch.nn.Module) else None
        named = _named(module.named_parameters() if module is not None else params)
        self._params = []
        self._names = []
        seen = {}
        for name, p in named:
            if not p.requires_grad:
                continue  # frozen: not trained, so not gossiped either
            if id(p) in seen:
                raise InvalidArgumentError(
                    f"parameter '{name}' is registered twice (it is the same tensor as "
                    f"'{seen[id(p)]}')")
            if p.dtype not in _DTYPES:
                raise InvalidArgumentError(
                    f"parameter '{name}' has dtype {p.dtype}; Grapevine trains float32, "
                    "bfloat16 and float16 parameters (call model.float() or model.bfloat16())")
            if p.device.type != "cpu":
                raise InvalidArgumentError(
                    f"parameter '{name}' is on {p.device}; Grapevine trains CPU tensors only "
                    "(call model.cpu())")
            if p.is_sparse:
                raise InvalidArgumentError(f"parameter '{name}' is sparse; dense tensors only")
            seen[id(p)] = name
            self._params.append(p)
            self._names.append(name)
        if not self._params:
            raise InvalidArgumentError("no trainable parameters (every one has requires_grad=False)")
        self._buffer_names, self._buffers = _chosen_buffers(module, buffers)
        # Everything registered with the peer, in its layout order: parameters, then buffers.
        self._tensors = self._params + self._buffers
        self._tensor_names = self._names + self._buffer_names
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidArgumentError(
                f"optimizer must be a torch.optim.Optimizer (or None), got "
                f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        self.peer = Peer(config, rank=rank, overrides=overrides, out_dir=out_dir,
                         incarnation=incarnation, resume=resume,
                         skip_missing_gradients=missing_grad == "skip", **kw_overrides)
        # A bfloat16/float16 tensor keeps its own storage; Grapevine holds an fp32 master copy of
        # it (mixing and Grapevine's optimizer in fp32, rounded once into the tensor per round).
        self._masters = [None] * len(self._tensors)
        with torch.no_grad():
            for k, (name, p) in enumerate(zip(self._tensor_names, self._tensors)):
                if not p.data.is_contiguous():
                    p.data = p.data.contiguous()
                values = p.data.view(-1) if p.dtype == torch.float32 else p.data.view(-1).float()
                if k < len(self._params):
                    self.peer.add_tensor(name, values.numpy())
                else:
                    self.peer.add_buffer(name, values.numpy())
            self.peer.start()
            # Zero-copy from here on: each fp32 tensor's storage is its slice of Grapevine's buffer.
            for k, (name, p) in enumerate(zip(self._tensor_names, self._tensors)):
                view = torch.from_numpy(self.peer.bind(name))
                if p.dtype == torch.float32:
                    p.data = view.view(p.shape)
                else:
                    self._masters[k] = view
            self._from_masters()
        # What replacing a tensor's .data later (model.half(), .to(), p.data = ...) changes.
        self._bound = [p.data_ptr() for p in self._tensors]
        stats = self.peer.stats()
        # torch.optim.Optimizer: param_groups with "lr" (lr schedulers), state, defaults. With a
        # wrapped optimizer they are its own objects, so a scheduler on either changes its lr.
        self._layout_fixed = False
        if optimizer is not None:
            super().__init__(self._params, dict(optimizer.defaults))
            self.param_groups = optimizer.param_groups
            self.state = optimizer.state
            self.defaults = optimizer.defaults
        else:
            super().__init__(self._params, {"lr": self.peer.scheduled_lr(stats.rounds)})
        self._layout_fixed = True
        self._lr_shown = None if optimizer is not None else self.param_groups[0]["lr"]
        self._lr_overridden = False
        self._finalized = False
        self._final = None  # (rounds, state) taken just before finalize
        self._pending = False
        self._saved_checkpoint = stats.last_checkpoint_round
        self.start_round = stats.rounds
        if stats.resumed_from_round >= 0:
            self._load_optimizer_checkpoint(stats.resumed_from_round)

    # ---- what a torch optimizer offers ---------------------------------------------------------

    def add_param_group(self, param_group):
        if getattr(self, "_layout_fixed", False):
            raise InvalidArgumentError(
                "add_param_group(): the gossiped model's layout is fixed when the optimizer is "
                "built (every peer exchanges the same tensors); pass every parameter to the "
                "constructor")
        super().add_param_group(param_group)

    def zero_grad(self, set_to_none=False):
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=set_to_none)
            return
        for p in self._params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    def step(self, closure=None, loss=None):
        """The optimizer step, then one gossip round. `closure` (as for torch optimizers)
        recomputes the loss; `loss` (a float or a 0-d tensor) goes into the records and the
        divergence check. Returns the closure's loss."""
        closure_loss = self._before_round(closure)
        value = self._loss_value(loss if loss is not None else closure_loss)
        if self.optimizer is not None:
            self.peer.mix(loss=value)
        else:
            self.peer.step(self._grads(), loss=value)
        self._from_masters()
        self._after_round()
        return closure_loss

    def start_step(self, closure=None, loss=None):
        """The first half of step(): the optimizer step and the round's messages on the wire.
        The parameters then hold the values before mixing; compute the next gradient, then
        wait(). This is algorithm.overlap."""
        if self._pending:
            raise InvalidArgumentError("start_step() twice without wait()")
        closure_loss = self._before_round(closure)
        value = self._loss_value(loss if loss is not None else closure_loss)
        if self.optimizer is not None:
            self.peer.start_mix(loss=value)
        else:
            self.peer.start_step(self._grads(), loss=value)
        self._from_masters()
        self._pending = True
        return closure_loss

    def wait(self):
        """Receives and mixes the round started by start_step()."""
        self.peer.wait()
        self._pending = False
        self._from_masters()
        self._after_round()

    def state_dict(self):
        """Everything needed to continue: the parameters' values, Grapevine's state besides them
        (its optimizer's momentum, the outer optimizer's momentum and anchor, CHOCO's public copy
        and neighbour replicas, DeepSqueeze's error: Peer.state()), the wrapped optimizer's state
        and the round count. Restoring every peer's state_dict of the same round continues the run
        exactly. After finalize() (e.g. a last checkpoint in a `finally` block after Ctrl-C) it
        holds Grapevine's state as the run ended and the parameters as they are now."""
        if self._finalized and self._final is None:
            raise FailedPreconditionError(
                "state_dict() after a run that ended by an error of Grapevine's own: its state "
                "could not be read")
        rounds, state = self._final if self._finalized else self._engine_state()
        return {
            "grapevine": {
                "rank": self.peer.rank,
                "world_size": self.peer.world_size,
                "rounds": rounds,
                "names": list(self._tensor_names),
                "params": [p.detach().clone() for p in self._tensors],
                "state": state,
            },
            "optimizer": None if self.optimizer is None else self.optimizer.state_dict(),
        }

    def load_state_dict(self, state):
        g = state.get("grapevine") if isinstance(state, dict) else None
        if g is None:
            raise InvalidArgumentError("not a DecentralizedOptimizer state_dict (no 'grapevine')")
        if list(g["names"]) != self._tensor_names:
            raise InvalidArgumentError(
                f"the state_dict holds tensors {g['names']}, this optimizer "
                f"{self._tensor_names}")
        for name, p, value in zip(self._tensor_names, self._tensors, g["params"]):
            if tuple(value.shape) != tuple(p.shape):
                raise InvalidArgumentError(
                    f"parameter '{name}' has shape {tuple(p.shape)}, the state_dict "
                    f"{tuple(value.shape)}")
        # Grapevine's state first: it checks every name and size before anything changes.
        self.peer.load_state({name: t.detach().contiguous().numpy()
                              for name, t in g.get("state", {}).items()})
        with torch.no_grad():
            for p, master, value in zip(self._tensors, self._masters, g["params"]):
                p.copy_(value)  # fp32: into Grapevine's buffer (.data is a view of it)
                if master is not None:  # bfloat16/float16: and its fp32 master
                    master.copy_(value.reshape(-1))
        if self.optimizer is not None and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])

    # ---- Grapevine -----------------------------------------------------------------------------

    @property
    def rank(self):
        return self.peer.rank

    @property
    def world_size(self):
        return self.peer.world_size

    @property
    def planned_rounds(self):
        return self.peer.planned_rounds

    @property
    def out_dir(self):
        return self.peer.out_dir

    def report(self, metrics=None, **kw_metrics):
        """The user's numbers into the next record, and the final record and summary when given
        before finalize(): report(test_accuracy=0.87, test_loss=0.35)."""
        self.peer.report(metrics, **kw_metrics)

    def poll_events(self):
        return self.peer.poll_events()

    def stats(self):
        return self.peer.stats()

    def finalize(self, average=True):
        """Ends the run; with `average`, every live peer ends holding the average of the live
        peers' parameters. Each parameter then gets its own storage (a copy of the final values),
        so the model no longer depends on the Peer. Idempotent."""
        if self._finalized:
            return
        if self._pending:
            self.wait()
        self._final = self._engine_state()
        self.peer.finalize(average=average)
        self._prune_optimizer_checkpoints()  # the last checkpoints are written now
        self._from_masters()
        with torch.no_grad():
            for p, master in zip(self._tensors, self._masters):
                if master is None:
                    p.data = p.data.clone()
        self._finalized = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._finalized:
            if exc_type is None:
                self.finalize(average=True)
            else:
                # Do not wait on a round we may have left half done; no averaging with a failure.
                self._pending = False
                try:
                    self._final = self._engine_state()
                except GrapevineError:
                    self._final = None  # the engine's own failure: state_dict() says so
                self.peer.finalize(average=False)
                self._finalized = True
        return False

    # ---- helpers -------------------------------------------------------------------------------

    # ---- checkpoints: the wrapped optimizer's state beside Grapevine's ---------------------------

    def _optimizer_checkpoint(self, round_):
        return os.path.join(self.peer.checkpoint_folder, f"round-{round_:010d}.torch.pt")

    def _after_round(self):
        """When Grapevine took a checkpoint this round (checkpoint.every), the wrapped optimizer's
        state_dict of the same round goes beside it, so that a resume continues it exactly; files
        whose Grapevine checkpoint is gone (checkpoint.keep) go too."""
        stats = self.peer.stats()
        if self.optimizer is None:
            if not self._lr_overridden:  # what the next step will use
                self._lr_shown = self.peer.scheduled_lr(stats.rounds)
                self.param_groups[0]["lr"] = self._lr_shown
            return  # Grapevine's own optimizer is in its checkpoint
        newest = stats.last_checkpoint_round
        if newest == self._saved_checkpoint:
            return
        self._saved_checkpoint = newest
        path = self._optimizer_checkpoint(newest)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        torch.save(self.optimizer.state_dict(), tmp)
        os.replace(tmp, path)
        self._prune_optimizer_checkpoints(keep=path)

    def _prune_optimizer_checkpoints(self, keep=None):
        """Removes the wrapped optimizer's files whose Grapevine checkpoint is gone
        (checkpoint.keep), except `keep` (Grapevine may still be writing its .ckpt in the
        background: checkpoint.background)."""
        folder = self.peer.checkpoint_folder
        if self.optimizer is None or not os.path.isdir(folder):
            return
        for name in os.listdir(folder):
            if not name.endswith(".torch.pt") or os.path.join(folder, name) == keep:
                continue
            if not os.path.exists(os.path.join(folder, name[:-len(".torch.pt")] + ".ckpt")):
                try:
                    os.remove(os.path.join(folder, name))
                except OSError:
                    pass

    def _load_optimizer_checkpoint(self, round_):
        if self.optimizer is None:
            return
        path = self._optimizer_checkpoint(round_)
        if not os.path.exists(path):
            warnings.warn(f"resumed from round {round_}, but {path} (the wrapped optimizer's "
                          "state of that round) is missing: the optimizer starts afresh",
                          RuntimeWarning, stacklevel=3)
            return
        self.optimizer.load_state_dict(torch.load(path))

    def _engine_state(self):
        """(rounds, {name: tensor}) of Grapevine's state now (Peer.stats(), Peer.state())."""
        return self.peer.stats().rounds, {name: torch.from_numpy(values)
                                          for name, values in self.peer.state().items()}

    def _before_round(self, closure):
        if self._finalized:
            raise InvalidArgumentError("step() after finalize()")
        self._check_bound()
        closure_loss = None
        if closure is not None:
            with torch.enable_grad():
                closure_loss = closure()
        if self.optimizer is not None:
            self.optimizer.step()
            self.peer.set_lr(float(self.optimizer.param_groups[0]["lr"]))  # for the records
        else:
            lr = self.param_groups[0]["lr"]
            # Untouched, param_groups[0]["lr"] shows optimizer.*'s schedule; once something (a
            # torch lr scheduler, the caller) sets it, that lr is used from then on.
            self._lr_overridden = self._lr_overridden or lr != self._lr_shown
            self.peer.set_lr(float(lr) if self._lr_overridden else None)
        self._to_masters()
        return closure_loss

    def _to_masters(self):
        """Before a round, the fp32 masters of bfloat16/float16 tensors take the tensors' values
        where those are authoritative: every such tensor when a torch optimizer stepped it, only
        buffers (updated by the forward pass) when Grapevine's optimizer steps the masters."""
        with torch.no_grad():
            for k, (p, master) in enumerate(zip(self._tensors, self._masters)):
                if master is not None and (self.optimizer is not None or k >= len(self._params)):
                    master.copy_(p.data.view(-1))

    def _from_masters(self):
        """After a round (or its first half): the tensors get their masters' values, rounded once."""
        with torch.no_grad():
            for p, master in zip(self._tensors, self._masters):
                if master is not None:
                    p.data.copy_(master.view(p.shape))

    def _check_bound(self):
        for name, p, ptr in zip(self._tensor_names, self._tensors, self._bound):
            if p.data_ptr() != ptr or p.dtype not in _DTYPES:
                raise InvalidArgumentError(
                    f"parameter '{name}' no longer uses Grapevine's buffer: its .data was "
                    f"replaced after the optimizer was built (now {p.dtype} on {p.device}; e.g. "
                    "by model.half(), .to() or p.data = ...), so it would silently leave gossip. "
                    "Set the model's dtype and device first, then build the optimizer")

    def _grads(self):
        grads = []
        for name, p in zip(self._names, self._params):
            g = p.grad
            if g is None:
                grads.append(None)
                continue
            if g.dtype not in _DTYPES or g.device.type != "cpu" or g.is_sparse:
                raise InvalidArgumentError(
                    f"the gradient of '{name}' is {g.dtype} on {g.device}; need a dense "
                    "float32, bfloat16 or float16 CPU tensor")
            if g.dtype != torch.float32:
                g = g.float()  # Grapevine's optimizer steps the fp32 master
            if not g.is_contiguous():
                g = g.contiguous()
            grads.append(g.detach().view(-1).numpy())
        return grads + [None] * len(self._buffers)  # buffers take no gradient

    @staticmethod
    def _loss_value(loss):
        if loss is None:
            return None
        if isinstance(loss, torch.Tensor):
            loss = loss.detach().item()
        return float(loss)  # NaN included: the divergence check sees it
