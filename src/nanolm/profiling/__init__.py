"""nanolm profile: where a training step's time goes, in plain words, with MFU (model FLOPs utilization)."""
