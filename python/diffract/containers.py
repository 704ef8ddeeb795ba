"""``diffract.containers``: Diffract's ``create_main_container``, for ``Session(container=...)``.

Diffract wires its session from a dependency-injection container built from a configuration
file or a profile; its guide opens a session that way (``Session(container=
create_main_container("configs/hybrid_s3.ini"))``). Here the container is what it carries: the
configuration file and profile, which ``Session(container=...)`` opens exactly as
``Session(config_path=..., profile=...)`` (an absent file warns and the profile applies, as in
Diffract). Diffract's providers (storage managers, executors) are not provided.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["MainContainer", "create_main_container"]


@dataclass(frozen=True)
class MainContainer:
    """The configuration a session opens with: a Diffract configuration file and/or profile."""

    config_path: str | os.PathLike[str] | None = None
    profile: str | None = None


def create_main_container(
    config_path: str | os.PathLike[str] | None = None, profile: str | None = None
) -> MainContainer:
    """Diffract's container factory: the configuration ``Session(container=...)`` opens.

    Args:
        config_path: a Diffract configuration file (INI, YAML, JSON); it wins over ``profile``.
        profile: a profile name (``"ram"``, ``"local"``...).

    Returns:
        a :class:`MainContainer` holding them; the session checks both when it opens.
    """
    return MainContainer(config_path=config_path, profile=profile)
