"""Training: AdamW with warmup + cosine LR, gradient clipping and accumulation, periodic eval,
bf16 autocast on CUDA, optional torch.compile; every run recorded and resumable bit for bit.

The public entry point is ``nanolm.train.train`` (``training.driver.train``). The package, by concern:

- ``driver``: ``train`` itself: a run (or a resume) from its config to its ``TrainResult``, on one process or as
  one rank of a data-parallel run;
- ``trainer``: one run's model, optimizer, batches and evaluation (``Trainer``: a step, a checkpoint);
- ``loop``: the step loop: logging, evaluation and checkpoints on schedule, the steady step time, stop requests
  (Ctrl-C, SIGTERM) and divergence;
- ``record``: the run's folder as training writes it (manifest, metrics log, tracker) and the ways a run ends;
- ``resume``: what a resume may change, the run's config with the user's changes merged in, and the checks
  that the checkpoint, data and world size are the run's;
- ``launch``: ``nanolm train --nproc N``: several ranks on this machine, and what is said when one fails;
- ``optim``: the optimizer, the learning-rate schedule and whether a run compiles its kernels.

Data-parallel: started by torchrun, srun or ``nanolm train --nproc N`` (launch_training), each process is a
rank of a DistributedDataParallel run (nanolm.distributed: gloo on CPU, NCCL on CUDA). The config's
batch_size is the global batch of one micro-step (each rank takes batch_size / world size, its own disjoint
slice of the sample stream), so the global batch per step is per-rank batch x ranks x grad_accum whatever
the world size, and a 2-process run computes what the 1-process run does, up to float rounding. Rank 0
writes the run's folder (manifest, metrics, checkpoints); every rank resumes from it; the ranks vote after
each step, so they stop (Ctrl-C, SIGTERM) and checkpoint at the same step.

The loop never syncs with the device on an ordinary step: per-step losses and gradient norms stay
on the device and are checked for NaN/inf when the loop logs, evaluates or checkpoints, which is
also when the run is stopped on divergence (naming the first bad step).
"""
