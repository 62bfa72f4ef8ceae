"""Output files written whole or not at all."""
from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["write_whole"]


def write_whole(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` (``str``: UTF-8) to ``path``, its folder created: through a temporary file beside it,
    renamed over it (``os.replace``) once complete. A reader, or a write that fails half-way (a full disk,
    a quota), finds the old file or the whole new one, never a part of it. Returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "xb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target
