"""Caches in front of a store's array reads: none, an in-process LRU with a byte budget,
or Redis. Keys name immutable values (a store id plus where the value was written), so a
cache entry can never be stale; values are encoded with :mod:`._codec`, never pickled."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from typing import Any

from diffract._errors import ConfigError
from diffract.store._codec import CodecError, decode, encode


class CacheWarning(RuntimeWarning):
    """The cache could not be used; the session goes on uncached."""


class NoCache:
    """Caches nothing."""

    name = "none"

    def get(self, key: str) -> Any | None:
        return None

    def set(self, key: str, value: Any) -> None:
        pass

    def describe(self) -> str:
        return "none"


class LRUCache:
    """In-process least-recently-used cache holding at most ``max_bytes`` of encoded values."""

    name = "lru"

    def __init__(self, max_bytes: int = 256 * 1024**2) -> None:
        if max_bytes <= 0:
            raise ConfigError(f"LRU cache size must be positive, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._data: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> Any | None:
        with self._lock:
            blob = self._data.get(key)
            if blob is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
        return decode(blob)

    def set(self, key: str, value: Any) -> None:
        blob = encode(value)
        if len(blob) > self.max_bytes:
            return  # larger than the whole budget: not cached
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._data[key] = blob
            self._bytes += len(blob)
            while self._bytes > self.max_bytes:
                _, evicted = self._data.popitem(last=False)
                self._bytes -= len(evicted)

    def describe(self) -> str:
        return f"lru ({self.max_bytes} bytes)"


class RedisCache:
    """A Redis server as a shared cache (``redis://host:port/db``). If the server cannot be
    reached, a :class:`CacheWarning` is issued once and every call is a miss."""

    name = "redis"

    def __init__(self, url: str, *, ttl: int | None = None, prefix: str = "diffract:") -> None:
        try:
            import redis
        except ImportError:
            raise ConfigError(
                "the Redis cache needs the redis package: pip install redis"
            ) from None
        self.url = url
        self.ttl = ttl
        self.prefix = prefix
        self._client = redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=2.0)
        self._down = False
        try:
            self._client.ping()
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        if not self._down:
            warnings.warn(
                f"Redis cache {self.url} is unreachable ({type(exc).__name__}: {exc}); going on uncached",
                CacheWarning,
                stacklevel=3,
            )
        self._down = True

    @property
    def available(self) -> bool:
        return not self._down

    def get(self, key: str) -> Any | None:
        if self._down:
            return None
        try:
            blob = self._client.get(self.prefix + key)
        except Exception as exc:
            self._fail(exc)
            return None
        if blob is None:
            return None
        try:
            return decode(blob)
        except CodecError:
            return None  # something else wrote this key: treat as a miss

    def set(self, key: str, value: Any) -> None:
        if self._down:
            return
        try:
            self._client.set(self.prefix + key, encode(value), ex=self.ttl)
        except Exception as exc:
            self._fail(exc)

    def describe(self) -> str:
        return f"redis ({self.url}{', unreachable' if self._down else ''})"


def make_cache(
    spec: str | None, *, max_bytes: int | None = None
) -> NoCache | LRUCache | RedisCache:
    """``None``/``"none"``, ``"lru"`` or a ``redis://`` URL -> a cache."""
    if spec is None or spec == "none":
        return NoCache()
    if spec == "lru":
        return LRUCache(max_bytes or 256 * 1024**2)
    if isinstance(spec, str) and spec.startswith(("redis://", "rediss://", "unix://")):
        return RedisCache(spec)
    raise ConfigError(
        f"unknown cache {spec!r}; valid caches are 'none', 'lru' and a 'redis://host:port/db' URL"
    )
