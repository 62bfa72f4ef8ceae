"""A deployment target: the Ascend SoC and CANN version a plan is checked against.

``Target(soc="Ascend310", cann="6.0.1")`` is validated at construction against the knowledge base
(full SoC names, never prefixes; CANN versions such as ``8.0.RC1``). The local machine's target is
:func:`dvpipe.probe.detect_target` (beside the rest of the environment probe: pyACL / npu-smi and the CANN
install-info files), None when there is no Ascend stack.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .errors import ConfigError

__all__ = ["Target"]


@dataclass(frozen=True)
class Target:
    """An Ascend deployment target.

    Attributes:
        soc: SoC name as ``acl.get_soc_name()`` reports it (``Ascend310P3``, ``Ascend910_9391``).
        cann: CANN version (``6.0.1``, ``8.0.RC1``, ``8.1.RC1.beta1``).
        driver: driver version, when known (keys the empirical capability cache).
    """

    soc: str
    cann: str
    driver: Optional[str] = None
    family: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        from .knowledge import CannVersion, family_of

        if not isinstance(self.soc, str) or not self.soc:
            raise ConfigError(f"Target.soc must be a SoC name such as 'Ascend310P3', got {self.soc!r}")
        try:
            fam = family_of(self.soc)
        except ValueError as e:  # the message lists the known names and explicit aliases
            raise ConfigError(f"Target.soc: {e}") from None
        try:
            CannVersion.parse(str(self.cann))
        except ValueError as e:
            raise ConfigError(f"Target.cann: {e}") from None
        object.__setattr__(self, "cann", str(self.cann))
        object.__setattr__(self, "family", fam)

    @property
    def version(self):
        """The parsed :class:`dvpipe.knowledge.CannVersion`."""
        from .knowledge import CannVersion

        return CannVersion.parse(self.cann)

    def __str__(self) -> str:
        return f"{self.soc} (CANN {self.cann})"
