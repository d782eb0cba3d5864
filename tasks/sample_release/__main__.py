"""``python -m vlmforge.tasks.sample_release DEST [--overwrite]``."""

from .sample_build import main

raise SystemExit(main())
