"""``python -m nanolm.problems.checks.step_timer SCRIPT STEPS``: run a training script with
``--steps STEPS`` and print, on the last line, ``NANOLM-STEP-TIMES {json}``: the time of each optimizer
step (torch's global optimizer-step hook), the loss each backward was called on, and the number of
parameters the optimizer steps (what it trains). The script runs
unchanged (as ``__main__``); what it prints goes to stderr, with the median step after the first 3
(warm-up). The bottleneck problem's checks time both scripts with it; a learner can too."""

from __future__ import annotations

import contextlib
import json
import runpy
import sys
import time

MARK = "NANOLM-STEP-TIMES "


def main(argv: list[str] | None = None) -> None:
    script, steps = (argv if argv is not None else sys.argv[1:])[:2]
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    times: list[float] = []
    losses: list[float] = []
    params: dict[int, int] = {}  # optimizer id -> parameters it steps

    def stepped(optimizer, *_) -> None:
        times.append(time.perf_counter())
        if id(optimizer) not in params:
            params[id(optimizer)] = sum(p.numel() for g in optimizer.param_groups for p in g["params"])

    register_optimizer_step_post_hook(stepped)
    backward = torch.Tensor.backward

    def recorded(self, *args, **kwargs):
        if self.numel() == 1:
            losses.append(float(self.detach()))
        return backward(self, *args, **kwargs)

    torch.Tensor.backward = recorded  # type: ignore[method-assign]
    sys.argv = [script, "--steps", str(steps)]
    out, error = sys.stdout, ""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            error = f"the script exited with code {e.code}"
    except Exception as e:  # the script's own error, reported in one line
        error = f"the script raised {type(e).__name__}: {e}"
    gaps = sorted(1000.0 * (b - a) for a, b in zip(times[3:], times[4:]))
    if gaps:
        print(
            f"{len(times)} optimizer steps; median step {gaps[len(gaps) // 2]:.2f} ms (after 3 warm-up steps)"
            + (f"; loss {losses[0]:.4g} -> {losses[-1]:.4g}" if losses else ""),
            file=sys.stderr,
        )
    out.write("\n" + MARK + json.dumps({"times": times, "losses": losses, "params": sum(params.values()), "error": error}) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
