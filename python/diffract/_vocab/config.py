"""Configuration: built-in profiles, a project file, environment variables, arguments.

Precedence, lowest to highest:

1. the profile's defaults (built-in, or a ``[profiles.NAME]`` table of the project file);
2. top-level keys of the project file: ``diffract.toml`` in the working folder, else
   ``[tool.diffract]`` in ``pyproject.toml``;
3. environment variables ``DIFFRACT_<KEY>`` (``DIFFRACT_PROFILE``, ``DIFFRACT_PATH``,
   ``DIFFRACT_CONVENTIONS``, ...);
4. arguments given to ``Session(...)`` (or the command line).

The profile itself is chosen by the same precedence (argument, then ``DIFFRACT_PROFILE``,
then the file's ``profile`` key, then ``"local"``). Unknown keys, profiles or values are
errors that list the valid ones. Empty ``DIFFRACT_*`` variables count as unset.

A project profile named like a built-in one extends it (keys it leaves out keep the
built-in's values); a new project profile on a backend other than ram needs a path from some
layer. The ``ram`` profile always means the ram backend: ``backend``/``path`` from the file or
the environment do not apply to it, and as arguments they are a conflict (ConfigError). A
``pyproject.toml`` that cannot be parsed is not ours: it is ignored with a warning.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import warnings
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

from diffract._errors import ConfigError

#: built-in profiles: name -> (backend, default path relative to the working folder). The
#: backends themselves are listed once, by the store's registry (diffract.store.BACKENDS),
#: which sits above this module: callers that check a backend name pass that list in.
PROFILES: dict[str, tuple[str, str | None]] = {
    "ram": ("ram", None),
    "local": ("hdf5", ".diffract"),
    "hdf5": ("hdf5", ".diffract"),
    "sqlite": ("sqlite", ".diffract.sqlite"),
    "zarr": ("zarr", ".diffract.zarr"),
    "hybrid": ("hybrid", ".diffract-hybrid"),
}


KEYS: dict[str, str] = {
    "profile": "name of a built-in or project profile",
    "backend": "a store backend: one of diffract.store.BACKENDS",
    "path": "store folder, file or fsspec URL",
    "arrays": "where a hybrid store keeps arrays: hdf5 or zarr",
    "cache": "none, lru, or a redis:// URL",
    "cache_bytes": "LRU cache budget, e.g. '512MB'",
    "memory_budget": "memory one run may hold, e.g. '2GB'",
    "workers": "threads across slices (int >= 1)",
    "lock_timeout": "seconds to wait for another writer (float >= 0)",
    "conventions": "kernel-option preset of every run: weightwatcher or diffract",
}
#: the convention presets a setting may name (diffract.kernels.conventions.CONVENTIONS)
CONVENTION_NAMES = ("weightwatcher", "diffract")
PROFILE_KEYS = tuple(k for k in KEYS if k != "profile")


@dataclass
class ResolvedConfig:
    """Every setting with its value and where it came from."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    config_file: str | None = None

    def __getitem__(self, key: str) -> Any:
        return self.values.get(key)

    def as_table(self) -> str:
        width = max(len(k) for k in KEYS)
        lines = [
            f"{k:<{width}}  {self.values.get(k)!s:<28}  ({self.sources.get(k, 'default')})"
            for k in KEYS
        ]
        if self.config_file:
            lines.append(f"\nproject config: {self.config_file}")
        return "\n".join(lines)


def _project_file(cwd: Path) -> tuple[dict[str, Any], str | None]:
    toml = cwd / "diffract.toml"
    if toml.exists():
        return _load_toml(toml), str(toml)
    pyproject = cwd / "pyproject.toml"
    if pyproject.exists():
        try:
            data = tomllib.loads(pyproject.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            # pyproject.toml belongs to the project, not to diffract: a broken one only means
            # there is no [tool.diffract] configuration to read.
            warnings.warn(
                f"{pyproject}: cannot read it ({exc}); ignoring it, so no [tool.diffract] "
                "configuration applies",
                stacklevel=3,
            )
            return {}, None
        tool = data.get("tool")
        section = tool.get("diffract") if isinstance(tool, dict) else None
        if section is not None:
            where = f"{pyproject} [tool.diffract]"
            if not isinstance(section, dict):
                raise ConfigError(
                    f"{where} must be a table of settings, got {type(section).__name__} {section!r}"
                )
            return section, where
    return {}, None


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the configuration ({exc})") from None


def _check_keys(data: dict[str, Any], where: str, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; valid keys are {list(allowed)}")


def _validate(key: str, value: Any, where: str, backends: Collection[str] | None = None) -> Any:
    if value is None:
        return None
    try:
        if key == "backend" and backends is not None and value not in backends:
            raise ValueError(f"valid backends are {list(backends)}")
        if key == "arrays" and value not in ("hdf5", "zarr"):
            raise ValueError("valid values are ['hdf5', 'zarr']")
        if key == "conventions" and value not in CONVENTION_NAMES:
            raise ValueError(f"valid conventions are {list(CONVENTION_NAMES)}")
        if key == "cache" and not (
            value in ("none", "lru") or str(value).startswith(("redis://", "rediss://", "unix://"))
        ):
            raise ValueError("valid caches are 'none', 'lru' and a redis:// URL")
        if key in ("cache_bytes", "memory_budget"):
            return parse_bytes(value, key)
        if key == "workers":
            return check_workers(value, key, from_text=where != "argument")
        if key == "lock_timeout":
            if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
                raise TypeError(
                    f"lock_timeout must be a number of seconds, got {type(value).__name__}"
                )
            t = float(value)
            if not math.isfinite(t) or t < 0:
                raise ValueError("lock_timeout must be a finite number of seconds >= 0")
            return t
        if key == "path":
            if not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"path must be a str or os.PathLike, got {type(value).__name__}")
            return os.fspath(value)
        if key == "profile":
            return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: invalid {key}={value!r} ({exc})") from None
    return value


def _profile_layers(
    profile: str, profiles_table: dict[str, Any], file_name: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """The chosen profile's own settings, as (source, values) layers, lowest first.

    A project profile named like a built-in one extends it: keys it does not set keep the
    built-in's values (when it changes the backend, the default path is that backend's
    built-in one). A new project profile defaults to the hdf5 backend and has no default path.
    """
    layers: list[tuple[str, dict[str, Any]]] = []
    if profile in PROFILES:
        backend, default_path = PROFILES[profile]
        table = profiles_table.get(profile, {})
        if table.get("backend") not in (None, backend) and table.get("path") is None:
            default_path = PROFILES.get(table["backend"], (None, None))[1]
        layers.append((f"profile {profile!r}", {"backend": backend, "path": default_path}))
    elif profile in profiles_table:
        layers.append((f"profile {profile!r} ({file_name})", {"backend": "hdf5"}))
    else:
        valid = sorted(set(PROFILES) | set(profiles_table))
        raise ConfigError(f"unknown profile {profile!r}; valid profiles are {valid}")
    if profile in profiles_table:
        layers.append((f"profile {profile!r} ({file_name})", dict(profiles_table[profile])))
    return layers


def resolve(
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    *,
    backends: Collection[str] | None = None,
    **explicit: Any,
) -> ResolvedConfig:
    """The configuration in force for ``Session(**explicit)`` run in ``cwd``.

    ``explicit`` holds the arguments; a value of ``None`` means "not given" (as ``Session``
    passes them). Empty ``DIFFRACT_*`` environment variables count as unset. ``backends``:
    the valid backend names (``diffract.store.BACKENDS``, which Session, the CLI and the
    magics pass); without it the backend is checked when its store opens.
    """
    cwd = Path(cwd or os.getcwd())
    env = dict(os.environ if env is None else env)
    _check_keys({k: v for k, v in explicit.items()}, "Session arguments", tuple(KEYS))
    file_data, file_name = _project_file(cwd)
    profiles_table = file_data.get("profiles", {})
    top = {k: v for k, v in file_data.items() if k != "profiles"}
    if file_name:
        _check_keys(top, file_name, tuple(KEYS))
        if not isinstance(profiles_table, dict):
            raise ConfigError(f"{file_name}: [profiles] must be a table of profile tables")
        for name, table in profiles_table.items():
            if not isinstance(table, dict):
                raise ConfigError(
                    f"{file_name}: profile {name!r} must be a table ([profiles.{name}] with "
                    f"keys {list(PROFILE_KEYS)}), got {type(table).__name__} {table!r}"
                )
            _check_keys(table, f"{file_name} [profiles.{name}]", PROFILE_KEYS)
        ram_table = profiles_table.get("ram", {})
        if ram_table.get("backend") not in (None, "ram") or ram_table.get("path") is not None:
            raise ConfigError(
                f"{file_name} [profiles.ram]: the ram profile keeps nothing on disk; it cannot "
                "set backend or path (define a profile with another name instead)"
            )
    env_values = {}
    for k in KEYS:
        raw = env.get(f"DIFFRACT_{k.upper()}")
        if raw is not None and raw.strip() != "":
            env_values[k] = raw

    out = ResolvedConfig(config_file=file_name)
    for source, data in (
        ("argument", explicit),
        ("environment", env_values),
        (file_name or "file", top),
    ):
        if data.get("profile") is not None:
            out.values["profile"], out.sources["profile"] = data["profile"], source
            break
    else:
        out.values["profile"], out.sources["profile"] = "local", "default"
    profile = out.values["profile"]
    if not isinstance(profile, str):
        raise ConfigError(
            f"{out.sources['profile']}: invalid profile={profile!r} (a profile is a name, "
            f"got {type(profile).__name__})"
        )
    profile_layers = _profile_layers(profile, profiles_table, file_name)
    top_layer, env_layer = top, env_values
    if profile == "ram":
        # the ram profile keeps nothing on disk: backend/path from the file or the
        # environment do not apply to it, and asking for them explicitly is a conflict
        conflicts = [
            f"{k}={explicit[k]!r}"
            for k in ("backend", "path")
            if explicit.get(k) is not None and not (k == "backend" and explicit[k] == "ram")
        ]
        if conflicts:
            raise ConfigError(
                f"profile 'ram' (from {out.sources['profile']}) keeps nothing on disk and always "
                f"uses the ram backend; it conflicts with the argument(s) {', '.join(conflicts)}: "
                "drop them, or choose another profile (e.g. profile='local')"
            )
        top_layer = {k: v for k, v in top.items() if k not in ("backend", "path")}
        env_layer = {k: v for k, v in env_values.items() if k not in ("backend", "path")}
    layers = [
        *profile_layers,
        (file_name or "file", top_layer),
        ("environment", env_layer),
        ("argument", explicit),
    ]
    defaults = {
        "arrays": "hdf5",
        "cache": "none",
        "cache_bytes": "256MB",
        "memory_budget": "2GB",
        "workers": 1,
        "lock_timeout": 0.0,
    }
    for key in PROFILE_KEYS:
        value, source = defaults.get(key), "default"
        for src, data in layers:
            if data.get(key) is not None:
                value, source = data[key], src
        out.values[key] = _validate(key, value, source, backends)
        out.sources[key] = source
    if out.values["backend"] == "ram":
        if explicit.get("path") is not None:
            raise ConfigError(
                f"the ram backend (from {out.sources['backend']}) keeps nothing on disk; it "
                f"conflicts with the argument path={explicit['path']!r}: drop path= or choose "
                "another backend"
            )
        out.values["path"] = None
        out.sources["path"] = out.sources["backend"]
    elif out.values["path"] is None:
        where = f"profile {profile!r}" + (f" in {file_name}" if profile in profiles_table else "")
        raise ConfigError(
            f"{where} sets no path, and the {out.values['backend']} backend needs one: add "
            f'path = "..." to [profiles.{profile}], set DIFFRACT_PATH, or pass path='
        )
    elif "://" not in str(out.values["path"]):
        p = Path(out.values["path"]).expanduser()
        out.values["path"] = str(p if p.is_absolute() else cwd / p)
    return out


DEFAULT_MEMORY_BUDGET = 2 * 1024**3

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*$", re.I)


def parse_bytes(value: int | float | str | None, what: str = "memory_budget") -> int:
    """``"2GB"``, ``"512 MiB"``, ``1e9`` -> bytes (powers of 1024 for every unit).

    Anything else (NaN, infinity, zero or less, a bool, an unknown unit) is a
    :class:`ConfigError` naming ``what``."""
    if value is None:
        return DEFAULT_MEMORY_BUDGET
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    ):
        if not math.isfinite(float(value)):
            raise ConfigError(f"{what} must be a finite number of bytes, got {value!r}")
        if value <= 0:
            raise ConfigError(f"{what} must be positive, got {value!r}")
        out = int(value)
        if out > 0:
            return out
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            unit = (m.group(2) or "b").lower()[0]
            mult = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[unit]
            out = int(float(m.group(1)) * mult)
            if out > 0:
                return out
    raise ConfigError(
        f"{what} must be a positive size like '2GB' or a number of bytes, got {value!r}"
    )


def check_workers(value: Any, what: str = "workers", *, from_text: bool = False) -> int:
    """``value`` as a number of workers (an int >= 1; with ``from_text`` a numeric string,
    as environment variables give, too); a :class:`ConfigError` naming ``what``."""
    if from_text and isinstance(value, str) and value.strip().lstrip("+").isdigit():
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{what} must be an int >= 1, got {type(value).__name__}: {value!r}")
    if value < 1:
        raise ConfigError(f"{what} must be an int >= 1, got {value!r}")
    return int(value)


#: Diffract's built-in profiles first, then ours
DIFFRACT_PROFILES = ("ram", "local", "hybrid")


def list_profiles(cwd: str | os.PathLike[str] | None = None) -> list[str]:
    """The profile names ``Session(profile=...)`` accepts.

    Args:
        cwd: the folder whose project file may define more (default: the working folder).

    Returns:
        ``ram``, ``local``, ``hybrid`` (Diffract's), then our other built-in ones and the
        project file's.
    """
    data, _ = _project_file(Path(cwd or os.getcwd()))
    table = data.get("profiles", {}) if isinstance(data.get("profiles"), dict) else {}
    names = [*DIFFRACT_PROFILES, *PROFILES, *table]
    return list(dict.fromkeys(names))
