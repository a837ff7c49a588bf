"""nanolm: a small GPT-style language model and the toolkit to profile, reproduce and interpret it."""

__version__ = "0.1.0"
