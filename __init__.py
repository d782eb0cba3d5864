"""vlmforge: vision-language training releases to Energon shards."""

__version__ = "0.1.0"
