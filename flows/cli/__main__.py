"""``python -m vlmforge.flows.cli``: the ``vlmforge`` console script."""

from . import main

main()
