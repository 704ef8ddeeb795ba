"""Caches in front of a store's array reads: none, an in-process LRU with a byte budget,
or Redis. Values are encoded with :mod:`._codec`, never pickled.

Keys name immutable values. A key ``sha256:<hex>`` is a *content address*: the digest of
the value's encoding that the store recorded when it wrote the value (HDF5 segment
manifests). Every cache checks an entry read under such a key against it, so a value served
from a cache is the value the store holds, whoever wrote the entry, and two stores (a store
and its ``cp -r`` copy, written apart since) can share a cache without one ever serving the
other's value: a forged or foreign entry is dropped and the value read from the store.

A shared cache (Redis) is used for content addresses only (:attr:`shared`); values a store
recorded no digest for (SQLite, hybrid and Zarr stores, segments written before digests)
are read from the store. The in-process LRU also caches those, under the store's own
location keys. Trust boundary: whoever can write the store's files decides its values;
whoever can only write to the Redis server can make reads slower, never change a value.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from typing import Any

from diffract._errors import ConfigError
from diffract.store._codec import DIGEST_PREFIX, CodecError, decode, encode, matches


class CacheWarning(RuntimeWarning):
    """The cache could not be used; the session goes on uncached."""


def _checked(key: str, blob: bytes) -> bool:
    """Whether ``blob`` may be served under ``key``: a content address must match it."""
    return not key.startswith(DIGEST_PREFIX) or matches(key, blob)


class NoCache:
    """Caches nothing."""

    name = "none"
    #: whether other processes (and other stores) read and write the same entries
    shared = False

    def get(self, key: str) -> Any | None:
        return None

    def set(self, key: str, value: Any) -> None:
        pass

    def describe(self) -> str:
        return "none"


class LRUCache:
    """In-process least-recently-used cache holding at most ``max_bytes`` of encoded values."""

    name = "lru"
    shared = False

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
            if not _checked(key, blob):  # cannot happen in-process; checked all the same
                self._bytes -= len(self._data.pop(key))
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
    shared = True

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
        #: entries dropped because they did not match their content address
        self.rejected = 0
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
        if not isinstance(blob, bytes):  # None (a miss); never text (no decode_responses)
            return None
        if not _checked(key, blob):  # forged, or damaged: dropped, read from the store
            self.rejected += 1
            self._drop(key, blob)
            return None
        try:
            return decode(blob)
        except CodecError:
            return None  # something else wrote this key: treat as a miss

    def _drop(self, key: str, blob: bytes) -> None:
        """Delete the entry ``key`` if it still holds ``blob`` (never a value set since)."""
        try:
            with self._client.pipeline() as pipe:
                pipe.watch(self.prefix + key)
                if pipe.get(self.prefix + key) == blob:
                    pipe.multi()
                    pipe.delete(self.prefix + key)
                    pipe.execute()
        except Exception:  # a race or a dropped connection: the next read checks it again
            pass

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
