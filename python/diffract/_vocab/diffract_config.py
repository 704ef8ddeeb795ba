"""The published Diffract's configuration files (INI, YAML, JSON) read as our settings.

``Session(config_path=...)`` reads Diffract's sections and keys and maps them onto ours
(:func:`settings_from_file`). Unknown sections and keys are errors (Diffract ignores them);
``logging`` is accepted but not applied (a session here never changes logging), as are the
metadata index, extractor, process pool and executor settings, which have no counterpart.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from diffract._errors import ConfigError
from diffract._vocab.config import PROFILES, check_workers

_ANY = "*"
#: section -> accepted keys (``*``: any key, a free-form mapping)
CONFIG_SECTIONS: dict[str, tuple[str, ...]] = {
    "logging": (_ANY,),
    "storage": ("backend",),
    "storage.sqlite": (
        "path",
        "wal_mode",
        "synchronous",
        "cache_size_kb",
        "readonly",
        "timeout",
        "read_pool_size",
        "array_threshold",
        "array_dir",
        "write_mmap_size",
        "read_cache_size_kb",
        "read_mmap_size",
        "pool_acquire_timeout",
        "max_overflow",
        "blob_write_workers",
        "batch_size_limit_bytes",
        "batch_soft_limit_ratio",
    ),
    "storage.hdf5": (
        "path",
        "root",
        "compression",
        "compression_opts",
        "shuffle",
        "fletcher",
        "swmr",
        "keep_file_open",
        "readonly",
        "chunks",
        "libver",
        "index_batch_size",
        "index_flush_interval",
        "batch_size_limit_bytes",
        "batch_soft_limit_ratio",
    ),
    "storage.zarr": (
        "store_url",
        "storage_options",
        "root",
        "readonly",
        "compressor",
        "target_chunk_mb",
        "lazy_index_sync",
        "max_concurrency",
        "batch_size_limit_bytes",
        "batch_soft_limit_ratio",
    ),
    "storage.zarr.storage_options": (_ANY,),
    "storage.hybrid": ("light", "heavy", "array_threshold"),
    "metadata": ("backend",),
    "metadata.sqlite": ("path", "timeout", "cache_size_kb"),
    "cache": ("backend",),
    "cache.simple": ("max_memory_mb", "ttl_seconds", "key_prefix", "memory_overhead_factor"),
    "cache.redis": (
        "host",
        "port",
        "db",
        "password",
        "max_memory_mb",
        "ttl_seconds",
        "key_prefix",
        "socket_timeout",
        "socket_connect_timeout",
        "retry_on_timeout",
        "max_connections",
    ),
    "parallel": (),
    "parallel.thread_pool": ("max_workers",),
    "parallel.process_pool": ("max_workers",),
    "nn": (),
    "nn.extractor": ("skip_not_implemented_types",),
    "export": ("default_export_format",),
    "compute": (),
    "compute.executor": (_ANY,),
}
#: the export formats of every table export (results, exports, the config's default), the one list
EXPORT_FORMATS = ("dict", "json", "list", "pandas", "polars")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand_env(text: str, env: dict[str, str] | None = None) -> str:
    """``${VAR}`` and ``$VAR`` replaced from the environment; unset ones are left as written."""
    env = dict(os.environ if env is None else env)

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return env.get(name, m.group(0))

    return _ENV.sub(sub, text)


def _coerce(raw: str) -> Any:
    """An INI value as Diffract reads it: None, bool, JSON, int, float, else the text."""
    import json

    low = raw.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    if raw[:1] in ("{", "[", '"'):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


def _expand_tree(value: Any, env: dict[str, str] | None) -> Any:
    if isinstance(value, str):
        return expand_env(value, env)
    if isinstance(value, dict):
        return {k: _expand_tree(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_tree(v, env) for v in value]
    return value


def read_config_file(
    path: str | os.PathLike[str], env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Diffract configuration file as nested sections, ``${VAR}`` expanded.

    Args:
        path: an ``.ini``, ``.yaml`` / ``.yml`` or ``.json`` file.
        env: the environment (default: ``os.environ``).

    Returns:
        ``{section: {key: value or subsection}}``.

    Raises:
        ConfigError: a missing file, another suffix, or a file that does not parse.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".ini", ".yaml", ".yml", ".json"):
        raise ConfigError(
            f"{p}: unsupported configuration file type {suffix!r}; use .ini, .yaml, .yml or .json"
        )
    if not p.is_file():
        raise ConfigError(f"configuration file {p} does not exist")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read it ({exc})") from None
    if suffix == ".ini":
        return _read_ini(p, text, env)
    try:
        if suffix == ".json":
            import json

            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError, json.JSONDecodeError
        raise ConfigError(f"{p}: malformed {suffix[1:].upper()} ({exc})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{p}: the top level must be a mapping of sections, got {type(data).__name__}"
        )
    return dict(_expand_tree(data, env))


def _read_ini(p: Path, text: str, env: dict[str, str] | None) -> dict[str, Any]:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text, source=str(p))
    except configparser.Error as exc:
        raise ConfigError(f"{p}: malformed INI ({exc})") from None
    out: dict[str, Any] = {}
    for section in parser.sections():
        node = out
        for part in section.split("."):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{p}: section [{section}] clashes with the key {part!r}")
        for key, raw in parser.items(section, raw=True):
            node[key] = _coerce(expand_env(raw.strip(), env))
    return out


def _flatten(data: dict[str, Any], where: str, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Nested sections as ``{dotted section: {key: value}}``, checked against the schema."""
    out: dict[str, dict[str, Any]] = {}
    name = prefix or "<top level>"
    allowed = CONFIG_SECTIONS.get(prefix, tuple(CONFIG_SECTIONS) if not prefix else None)
    if allowed is None:
        raise ConfigError(
            f"{where}: unknown section [{prefix}]; known sections are {sorted(CONFIG_SECTIONS)}"
        )
    if _ANY in allowed:
        out[prefix] = dict(data)
        return out
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and dotted in CONFIG_SECTIONS:
            out.update(_flatten(value, where, dotted))
        elif not prefix:
            raise ConfigError(
                f"{where}: unknown section [{key}]; known sections are "
                f"{sorted(s for s in CONFIG_SECTIONS if '.' not in s)}"
            )
        elif key not in allowed:
            raise ConfigError(
                f"{where}: unknown key {key!r} in [{name}]; valid keys are {list(allowed)}"
            )
        else:
            out.setdefault(prefix, {})[key] = value
    return out


def _lab_path(path: Any, cwd: Path, backend: str) -> str:
    """Where our store goes for a Diffract store path: never inside Diffract's files.

    Diffract's own layout (``<root>/.diffract/sqlite/...``, ``.../hybrid/...``,
    ``.../zarr_store``) maps onto our default path of the backend under ``<root>``
    (``.diffract.sqlite``, ``.diffract-hybrid``, ``.diffract.zarr``, ``.diffract``); any
    other file ``store.db`` onto a folder beside it, ``store.diffract-lab``.
    """
    text = str(path)
    if "://" in text:
        return text.rstrip("/") + ".diffract-lab"
    p = Path(text).expanduser()
    p = p if p.is_absolute() else cwd / p
    default = PROFILES.get(backend, (None, None))[1]
    if default is not None:
        if p.parent.name in ("sqlite", "hybrid") and p.parent.parent.name == ".diffract":
            return str(p.parent.parent.parent / default)
        if p.name == "zarr_store" and p.parent.name == ".diffract":
            return str(p.parent.parent / default)
    return str(p.with_name(p.stem + ".diffract-lab"))


def settings_from_file(
    path: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    *,
    backends: Collection[str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Our ``Session`` settings for a Diffract configuration file, and the extras.

    Args:
        path: the file (see :func:`read_config_file`).
        cwd: the folder relative store paths are taken from (default: the working folder).
        env: the environment for ``${VAR}``.
        backends: the valid backend names (``diffract.store.BACKENDS``, the store's registry);
            without it the backend is checked when its store opens.

    Returns:
        ``(settings, extras)``: ``settings`` holds keys of :data:`KEYS` (``backend``,
        ``path``, ``arrays``, ``cache``, ``cache_bytes``, ``workers``); ``extras`` holds
        ``default_export_format`` and the sections read but not applied (``ignored``).

    Raises:
        ConfigError: a file that cannot be read, an unknown section or key, or a bad value.
    """
    where = str(path)
    sections = _flatten(read_config_file(path, env), where)
    base = Path(cwd or os.getcwd())

    def get(section: str, key: str, default: Any = None) -> Any:
        return sections.get(section, {}).get(key, default)

    settings: dict[str, Any] = {}
    backend = get("storage", "backend") or "ram"  # INI "none" reads as None
    if backends is not None and backend not in backends:
        raise ConfigError(
            f"{where}: invalid [storage] backend={backend!r}; valid: {list(backends)}"
        )
    settings["backend"] = backend
    if backend == "hybrid":
        heavy = get("storage.hybrid", "heavy", "hdf5")
        if heavy not in ("hdf5", "zarr", "ram", "sqlite"):
            raise ConfigError(f"{where}: invalid [storage.hybrid] heavy={heavy!r}")
        settings["arrays"] = "zarr" if heavy == "zarr" else "hdf5"
        light = get("storage.hybrid", "light", "sqlite")
        source = get(f"storage.{light}", "path") or get("storage.sqlite", "path")
    elif backend == "zarr":
        source = get("storage.zarr", "store_url")
    else:
        source = get(f"storage.{backend}", "path")
    if backend != "ram":
        if source in (None, ":memory:"):
            raise ConfigError(
                f"{where}: the {backend} backend needs a path ([storage.{backend}] path=...)"
            )
        settings["path"] = _lab_path(source, base, backend)
    cache = get("cache", "backend") or "none"
    if cache == "simple":
        settings["cache"] = "lru"
        settings["cache_bytes"] = f"{get('cache.simple', 'max_memory_mb', 256)}MB"
    elif cache == "redis":
        auth = f":{get('cache.redis', 'password')}@" if get("cache.redis", "password") else ""
        host, port = get("cache.redis", "host", "localhost"), get("cache.redis", "port", 6379)
        settings["cache"] = f"redis://{auth}{host}:{port}/{get('cache.redis', 'db', 0)}"
    elif cache != "none":
        raise ConfigError(f"{where}: invalid [cache] backend={cache!r}; valid: none, simple, redis")
    workers = get("parallel.thread_pool", "max_workers")
    if workers is not None:
        settings["workers"] = check_workers(workers, f"{where} [parallel.thread_pool] max_workers")
    fmt = get("export", "default_export_format", "dict")
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(
            f"{where}: invalid [export] default_export_format={fmt!r}; valid: {list(EXPORT_FORMATS)}"
        )
    applied = {
        "storage",
        "storage.hybrid",
        "cache",
        "cache.simple",
        "cache.redis",
        "export",
        "parallel.thread_pool",
        f"storage.{backend}",
    }
    extras = {
        "default_export_format": fmt,
        "ignored": sorted(s for s in sections if s not in applied),
    }
    return settings, extras
