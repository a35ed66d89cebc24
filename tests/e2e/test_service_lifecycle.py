"""The service as an operator runs it: a rolling update sends SIGTERM while
kube-scheduler holds its keep-alive connection to the extender."""

from __future__ import annotations

import http.client
import json
import signal
import time

from extender.devcluster.stack import GangStack

# How long the old service may take to exit after SIGTERM before the stack SIGKILLs it.
STOP_WAIT_SECONDS = 20


def test_sigterm_ends_the_service_cleanly_while_a_scheduler_holds_a_keep_alive_connection(
    gang_stack: GangStack,
) -> None:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", gang_stack.extender_port, context=gang_stack.https_context(), timeout=10
    )
    body = json.dumps({"Pod": {"metadata": {"name": "probe", "uid": "probe-uid"}}, "NodeNames": []})
    conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
    answer = conn.getresponse()
    assert answer.status == 200
    answer.read()  # the connection stays open, idle, as kube-scheduler's does
    old = gang_stack.service
    assert old is not None
    try:
        old.terminate()
        old.finish(time.monotonic() + STOP_WAIT_SECONDS)
        # 0: it shut down on SIGTERM; -SIGKILL: it had to be killed after the wait.
        assert old.returncode == 0, f"exit code {old.returncode} (-{signal.SIGKILL} = killed)"
    finally:
        conn.close()
        gang_stack.start_service(name="gang-extender-after-sigterm")
