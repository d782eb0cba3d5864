"""``vlmforge catalog --estimate``: objects, bytes, disk and hours of a run, per subset, before any media
body is read. The front door is :func:`.release_estimate.estimate_release`."""
