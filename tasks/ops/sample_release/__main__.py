"""``python -m vlmforge.tasks.ops.sample_release DEST [--overwrite]``."""

from .build import main

raise SystemExit(main())
