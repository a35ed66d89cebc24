"""The API connection as the layers above kube/ hold it: a handle and its one error.

controller/ and cli pass the handle (`RawApi`) to kube/'s typed reads and writes and
judge the `KubeError` those raise; they never build a path or send a request. The
call primitive and the path builder stay in rawapi.py, which pyproject's
`rest-only-in-kube` contract forbids them to import.
"""

from __future__ import annotations

from extender.kube.rawapi import KubeError, RawApi

__all__ = ["KubeError", "RawApi"]
