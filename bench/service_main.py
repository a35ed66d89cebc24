"""`python -m bench.service_main serve ...`: `gang-extender serve`, with SIGPIPE left ignored.

`extender.cli.main` sets SIGPIPE to SIG_DFL for every command (right for
`gang-extender status | head`, wrong for `serve`): the service then dies
silently (exit -13) the first time it writes to a socket its peer has closed,
which the plain-pod workload hits within seconds. Until cli.py restores the
handler only for the printing commands, the bench starts the service through
this shim, which changes nothing else: same module, same `main`, same flags.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from extender import cli

_install = signal.signal


def _keep_sigpipe_ignored(signum: int, handler: Any) -> Any:
    if signum == signal.SIGPIPE:
        return signal.getsignal(signum)
    return _install(signum, handler)


if __name__ == "__main__":
    signal.signal = _keep_sigpipe_ignored  # type: ignore[assignment]
    sys.exit(cli.main())
