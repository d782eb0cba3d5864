"""``python -m vlmforge.tasks.ops.sample_release DEST [--overwrite]``."""

from .sample_build import main

raise SystemExit(main())
