"""python -m nanolm: the same as the nanolm command."""

from .cli import main

main()
