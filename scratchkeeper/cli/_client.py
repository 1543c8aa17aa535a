"""Building the ``scratchkeeper`` command's C client (``native/client.c``) for one install.

The client hands ``plan``, ``submit`` and ``status`` to the user's command server
(:mod:`._server`) and runs everything else as the Python console script; it is built per
install, with that install's console script and interpreter compiled in:
``python -m scratchkeeper.cli._client OUTPUT`` (the runtime install runs it,
scripts/localcluster/runtime.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("native") / "client.c"


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build(output: Path, fallback: Path, python: Path, *, cc: str = "cc") -> Path:
    """Compile the client into ``output`` (replaced in one rename) for the console script
    ``fallback`` and the interpreter ``python``."""
    from ..errors import InputError
    from ..runner import get_runner

    for what, path in (("console script", fallback), ("interpreter", python)):
        if not path.is_absolute() or not os.access(path, os.X_OK):
            raise InputError(f"{path}: the {what} to build the client for is not an absolute "
                             "path to an executable")
    partial = output.with_name(f".{output.name}.{os.getpid()}")
    try:
        get_runner().run([cc, "-std=gnu11", "-O2", "-Wall", "-Wextra",
                          f"-DSK_FALLBACK={_c_string(str(fallback))}",
                          f"-DSK_PYTHON={_c_string(str(python))}", str(SOURCE), "-o",
                          str(partial)], timeout=120)
        os.chmod(partial, 0o755)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    return output


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m scratchkeeper.cli._client OUTPUT", file=sys.stderr)
        return 2
    python = Path(sys.executable)
    build(Path(args[0]).absolute(), python.with_name("scratchkeeper"), python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
