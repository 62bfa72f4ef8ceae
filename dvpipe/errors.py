"""One error family for dvpipe.

Every error a user can meet derives from :class:`DvpipeError` *and* from the builtin that
matches its meaning (``ValueError`` for bad configuration, ``RuntimeError`` for a backend that
failed at run time, ``ImportError`` for a missing optional dependency), so callers can catch
either the library family or the Python meaning.
"""
from __future__ import annotations


class DvpipeError(Exception):
    """Base class of every dvpipe error."""


class ConfigError(DvpipeError, ValueError):
    """Bad configuration or arguments, detected before anything runs.

    ``path`` names the offending field (``cameras[2].intrinsics``) when there is one. ``problems``: each
    problem as ``"key.path: message"``, when several are reported at once (the message joins them with "; ",
    and a message may itself hold "; ", so split ``problems``, not the message).
    """

    def __init__(self, message: str, path: str | None = None, problems: tuple[str, ...] = ()):
        self.path = path
        self.message = message
        self.problems = tuple(problems) or ((f"{path}: {message}" if path else message),)
        super().__init__(f"{path}: {message}" if path else message)


class FrameError(DvpipeError, ValueError):
    """One frame could not be processed (corrupt, wrong size, unsupported by a unit).

    The pipeline turns it into a counted drop with ``reason`` unless asked to raise.
    """

    def __init__(self, reason: str, camera: str | None = None):
        self.reason = reason
        self.camera = camera
        super().__init__(f"{camera}: {reason}" if camera else reason)


class CorruptFrameError(FrameError):
    """The decoder reported damaged data (libjpeg warnings, FFmpeg's corrupt flag or a decode error).

    A drop with reason category ``corrupt`` under the default policy (``on_corrupt="drop"``);
    under ``on_corrupt="flag"`` the kernel keeps the decoded (concealed) picture instead and the
    frame's meta carries ``corrupt: True`` with the reason (see :meth:`KernelContext.corrupt`).
    """


class StaleBatchError(DvpipeError, BufferError):
    """A batch's images were read after the pipeline reused their output buffer (``batch.keep()`` copies)."""


class BackendUnavailable(DvpipeError, RuntimeError):
    """A backend was asked for but cannot run here; ``reason`` says why."""

    def __init__(self, backend: str, reason: str):
        self.backend = backend
        self.reason = reason
        super().__init__(f"backend {backend!r} is unavailable: {reason}")


class MissingDependencyError(DvpipeError, ImportError):
    """An optional dependency is not installed; the message says how to install it."""


class ClosedError(DvpipeError, RuntimeError):
    """An object was used after it was closed (a model, a runtime); the message says what to open again."""


class PlanError(DvpipeError, ValueError):
    """No backend in the preference order can run a step; the message lists every verdict."""
