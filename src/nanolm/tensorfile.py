"""Saved tensors held to the config saved beside them.

Every artifact nanolm saves is a config (JSON) and its tensors (safetensors): an SAE, a reward model, a tuned
lens, a checkpoint. When the two disagree (a config edited by hand, files of two trainings mixed in one folder),
the artifact is refused naming both numbers, e.g. ``W_enc is 64 × 512 where cfg.json (d_in 128, d_sae 512)
makes it 128 × 512``, before the module is built at the config's size: the expected shapes come from building
it on torch's meta device, which allocates nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from .errors import UserError

Shapes = Mapping[str, tuple[int, ...]]


def shapes_in_file(path: str | Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} from a safetensors file's header; no tensor's data is read. Raises safetensors'
    SafetensorError (or OSError) for a file that is not one, as loading it would."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118 (safe_open is not iterable)


def shapes_of(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """{name: shape} of loaded tensors."""
    return {name: tuple(t.shape) for name, t in tensors.items()}


def module_shapes(build: Callable[[], torch.nn.Module]) -> dict[str, tuple[int, ...]]:
    """{state-dict name: shape} of the module build() makes, built on the meta device (no memory, no init)."""
    with torch.device("meta"):
        return shapes_of(build().state_dict())


def _dims(shape: tuple[int, ...]) -> str:
    """(64, 512) -> '64 × 512'; () -> 'a scalar'."""
    return " × ".join(str(n) for n in shape) if shape else "a scalar"


def first_disagreement(found: Shapes, expected: Shapes, config: str) -> str | None:
    """The first way the file's tensors (found) differ from what the config makes (expected), in words; None
    when they agree. A differing shape is named before a missing or an extra tensor."""
    for name, shape in expected.items():
        if name in found and tuple(found[name]) != tuple(shape):
            return f"{name} is {_dims(tuple(found[name]))} where {config} makes it {_dims(tuple(shape))}"
    missing = [name for name in expected if name not in found]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"it has no tensor {missing[0]}{more}, which {config} needs"
    extra = [name for name in found if name not in expected]
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        return f"it holds a tensor {extra[0]}{more} that {config} has no place for"
    return None


def check_tensors_match_config(weights: str | Path, found: Shapes, expected: Shapes, config: str, fix: str) -> None:
    """A UserError in one line unless the tensors in `weights` are the shapes `config` (a phrase naming the
    config file and its numbers, e.g. "cfg.json (d_in 128, d_sae 512)") makes; `fix` says what to do."""
    why = first_disagreement(found, expected, config)
    if why is not None:
        raise UserError(f"{weights} disagrees with its config: {why}; {fix}")
