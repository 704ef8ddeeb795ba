"""``diffract.core.compute.config``: Diffract's ``KernelConfig``, what ``configure_kernel``
returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diffract._errors import InvalidConfigurationError


class KernelConfig(dict[str, Any]):
    """A kernel's option values, with Diffract's API: ``as_dict()`` and a checked ``update``.

    It is a dict too (``configure_kernel(...) == {"rtol": 1e-6}``, ``cfg["rtol"]``), so code
    written for either library reads it. The keys given when it is made are the options it
    knows: ``update`` refuses others, as Diffract's does.

    Args:
        **kwargs: the option values (and the known options).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(kwargs)
        self._defaults = dict(kwargs)

    def as_dict(self) -> dict[str, Any]:
        """The option values, as a plain dict (a copy).

        Returns:
            Option name -> value.
        """
        return dict(self)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        """Set values from another KernelConfig (or a mapping, or keywords).

        Args:
            other: a :class:`KernelConfig` or a mapping of option values.
            **kwargs: more option values.

        Raises:
            InvalidConfigurationError: an option this configuration does not know (Diffract's
                ``InvalidConfiguration``).
        """
        upd = dict(other.as_dict() if isinstance(other, KernelConfig) else dict(other))
        upd.update(kwargs)
        invalid = sorted(set(upd) - set(self._defaults))
        if invalid:
            raise InvalidConfigurationError(
                f"Invalid kernel configuration parameters: {invalid}; known: "
                f"{sorted(self._defaults)}"
            )
        super().update(upd)

    def __repr__(self) -> str:
        return f"KernelConfig({', '.join(f'{k}={v!r}' for k, v in self.items())})"

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> KernelConfig:
        """A KernelConfig holding ``values``.

        Args:
            values: option name -> value.

        Returns:
            The configuration.
        """
        return cls(**dict(values))


__all__ = ["KernelConfig"]
