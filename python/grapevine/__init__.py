"""Grapevine: decentralized (gossip) training driven from your own Python training loop.

    import grapevine
    with grapevine.Peer("run.yaml", rank=0) as peer:       # or a dict; rank from GRAPEVINE_RANK
        peer.add_tensor("w", w)                            # numpy float32, contiguous
        peer.start()                                       # every peer now holds rank 0's w
        w = peer.bind("w").reshape(w.shape)                # zero-copy from here on
        for _ in range(peer.planned_rounds):
            peer.step([grad(w)], loss=...)                 # Grapevine's optimizer + one gossip round
        peer.finalize(average=True)                        # every live peer holds the average

PyTorch users want grapevine.torch.DecentralizedOptimizer (docs/api.md).

Errors: every error is a GrapevineError with `code` and `code_name`; the subclasses also derive
from the matching builtin, so `except ValueError` catches a bad config:
    InvalidArgumentError (ValueError)       bad config, override, tensor, dtype, rank, argument
    NotFoundError (LookupError)             a missing config file or tensor name
    FailedPreconditionError (RuntimeError)  a call in the wrong state (step() before start())
    UnavailableError (ConnectionError)      the network (bootstrap failed, port in use)
    AbortedError                            training diverged (here or at a peer)
    InternalError (RuntimeError)            a bug in Grapevine
"""

import math
import os

from ._grapevine import (  # noqa: F401  (re-exported)
    API_VERSION,
    AbortedError,
    Event,
    EventKind,
    FailedPreconditionError,
    GrapevineError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    Stats,
    UnavailableError,
)
from ._grapevine import Peer as _Peer

__all__ = [
    "API_VERSION",
    "AbortedError",
    "Event",
    "EventKind",
    "FailedPreconditionError",
    "GrapevineError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "Peer",
    "Stats",
    "UnavailableError",
    "config_options",
    "to_yaml",
]


def _yaml_scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise InvalidArgumentError(f"config value {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        # Quoted (JSON string syntax is valid YAML) so that "1e3", "yes" or "a: b" stay strings.
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise InvalidArgumentError(
        f"config value {value!r} of type {type(value).__name__} cannot be written as YAML"
    )


def _yaml_flow(value):
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_flow(v) for v in value) + "]"
    return _yaml_scalar(value)


def _nested(config):
    """`config` with dotted keys ("optimizer.lr": 0.1) expanded into sections."""
    out = {}
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"config key {key!r} is not a non-empty string")
        if isinstance(value, dict):
            value = _nested(value)
        *sections, leaf = key.split(".")
        node = out
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise InvalidArgumentError(f"config key {key!r}: {section!r} is not a section")
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            node[leaf].update(value)
        else:
            node[leaf] = value
    return out


def to_yaml(config):
    """The YAML text of a config dict ({"run": {"rounds": 100}, ...}): nested dicts are sections,
    lists are sequences, and dotted keys ({"optimizer.lr": 0.1}) are expanded into sections."""
    if not isinstance(config, dict):
        raise InvalidArgumentError(f"a config must be a dict, got {type(config).__name__}")
    return "".join(f"{key}: {_yaml_flow(value)}\n" for key, value in _nested(config).items())


def _override_value(value):
    """The right-hand side of a `key=value` override, as `--set` would read it."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, dict)):
        return _yaml_flow(value)
    return _yaml_scalar(value)


def override_list(overrides):
    """["key=value", ...] from a dict {"optimizer.lr": 0.05} or {"optimizer__lr": 0.05} (a
    double underscore stands for a dot, so keys can be Python keyword arguments), or from a list
    of "key=value" strings (passed through)."""
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        out = []
        for key, value in overrides.items():
            if not isinstance(key, str) or not key:
                raise InvalidArgumentError(f"override key {key!r} is not a non-empty string")
            out.append(key.replace("__", ".") + "=" + _override_value(value))
        return out
    if isinstance(overrides, str):
        return [overrides]
    out = []
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise InvalidArgumentError(f"override {item!r} is not a 'key=value' string")
        out.append(item)
    return out


def config_options(config=None):
    """(config_path, config_text) for the C++ Options from a path, a dict or None.

    None reads GRAPEVINE_CONFIG (set by `grapevine launch`): a file path, or the YAML text itself.
    A str is a path when it names an existing file or has no newline, else YAML text."""
    if config is None:
        config = os.environ.get("GRAPEVINE_CONFIG")
        if not config:
            raise InvalidArgumentError(
                "no config: pass config=PATH or a dict, or start the program with "
                "`grapevine launch CONFIG -- COMMAND` (which sets GRAPEVINE_CONFIG)"
            )
    if isinstance(config, dict):
        return "", to_yaml(config)
    if isinstance(config, os.PathLike):
        return os.fspath(config), ""
    if isinstance(config, str):
        if os.path.isfile(config) or "\n" not in config:
            return config, ""
        return "", config
    raise InvalidArgumentError(
        f"config must be a path, a dict or YAML text, got {type(config).__name__}"
    )


class Peer(_Peer):
    """One gossip-training peer (the C++ grapevine::Peer; docs/api.md).

    Peer(config=None, *, rank=None, overrides=None, out_dir=None, incarnation=0, resume=None,
         **kw_overrides)
      config     a YAML path, a dict, YAML text, or None for $GRAPEVINE_CONFIG;
      rank       None: from GRAPEVINE_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMIX_RANK;
      overrides  {"optimizer.lr": 0.05} or ["optimizer.lr=0.05"], applied last like `--set`;
      resume     continue from the checkpoints (checkpoint.every) after start(): every peer agrees
                 on the newest round all have; stats().rounds is then where the loop continues.
                 None (or False): GRAPEVINE_RESUME=1 (`grapevine launch --resume ... --
                 COMMAND`) decides, as for every program through the C++ Peer;
      skip_missing_gradients  a None gradient in step() leaves its tensor (and its momentum)
                 alone, as torch does; False: it is a zero gradient;
      kw_overrides  optimizer__lr=0.05 (double underscore = dot), applied after `overrides`.
    Used as a context manager it finalizes on exit: with averaging when the block ended normally.
    """

    def __init__(self, config=None, *, rank=None, overrides=None, out_dir=None, incarnation=0,
                 resume=None, skip_missing_gradients=False, **kw_overrides):
        path, text = config_options(config)
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)):
            raise InvalidArgumentError(f"rank must be an int, got {rank!r}")
        if rank is not None and rank < 0:
            raise InvalidArgumentError(f"rank {rank} is out of range (ranks are >= 0)")
        super().__init__(
            config_path=path,
            config_text=text,
            overrides=override_list(overrides) + override_list(kw_overrides),
            rank=-1 if rank is None else rank,
            out_dir="" if out_dir is None else os.fspath(out_dir),
            incarnation=incarnation,
            resume=bool(resume),  # the C++ Peer also resumes when GRAPEVINE_RESUME=1
            skip_missing_gradients=bool(skip_missing_gradients),
        )

    def report(self, metrics=None, **kw_metrics):
        """Adds numbers to the next record (and the final record and summary when given before
        finalize()): report(test_accuracy=0.87) or report({"test_accuracy": 0.87})."""
        values = dict(metrics or {})
        values.update(kw_metrics)
        for key, value in values.items():
            if not isinstance(key, str) or not key:
                raise InvalidArgumentError(f"metric name {key!r} is not a non-empty string")
            try:
                values[key] = float(value)
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"metric {key!r} = {value!r} is not a number") from None
        super().report(values)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.finalize(average=exc_type is None)
        return False
