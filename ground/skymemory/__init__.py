"""SkyMemory: a LEO satellite constellation as a cache for transformer KV caches."""

__version__ = "0.1.0"
