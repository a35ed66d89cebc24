"""hack/demo_transcript.py replaces only what a cluster picks run to run."""

from __future__ import annotations

from tests.e2e.test_demo_transcript import demo_transcript

RUN_A = """\
starting...
== kubectl apply -n horovod-81138249 -f examples/horovod/horovod-job.yaml
== held: gang horovod-81138249/lm-horovod-job: needs 3 (1 for lm-horovod-job-worker-97cf99996-xpfwc)
== placed: gang horovod-81138249/lm-horovod-job: 4/4 members bound (phase Running)
   lm-horovod-job-master                    -> gpu-small-0   (lm-horovod-job-master-0.lm-horovod-job)
   lm-horovod-job-worker-97cf99996-2f7tx    -> gpu-small-0   (lm-horovod-job-worker-1.lm-horovod-job)
   lm-horovod-job-worker-97cf99996-xpfwc    -> gpu-big-0   (lm-horovod-job-worker-0.lm-horovod-job)
== /etc/volcano/hostfile (what mpiexec/deepspeed read):
   lm-horovod-job-master-0.lm-horovod-job slots=1
"""

RUN_B = """\
== kubectl apply -n horovod-5521ab0f -f examples/horovod/horovod-job.yaml
== held: gang horovod-5521ab0f/lm-horovod-job: needs 3 (1 for lm-horovod-job-worker-6d8f9c7b5-abcde)
== placed: gang horovod-5521ab0f/lm-horovod-job: 4/4 members bound (phase Running)
   lm-horovod-job-worker-6d8f9c7b5-abcde    -> gpu-small-0   (lm-horovod-job-worker-1.lm-horovod-job)
   lm-horovod-job-master                    -> gpu-big-0   (lm-horovod-job-master-0.lm-horovod-job)
   lm-horovod-job-worker-6d8f9c7b5-fghij    -> gpu-small-0   (lm-horovod-job-worker-0.lm-horovod-job)
== /etc/volcano/hostfile (what mpiexec/deepspeed read):
   lm-horovod-job-master-0.lm-horovod-job slots=1
"""


def test_two_runs_that_differ_only_in_names_and_placements_are_equal() -> None:
    script = demo_transcript()
    a, b = script.transcript(RUN_A), script.transcript(RUN_B)
    assert not a.startswith("starting")
    assert script.normalise(a) == script.normalise(b)


def test_a_changed_message_a_missing_line_or_a_host_file_change_is_drift() -> None:
    script = demo_transcript()
    base = script.normalise(script.transcript(RUN_A))
    for changed in (
        RUN_A.replace("needs 3", "needs 3; short of room"),
        RUN_A.replace("== /etc/volcano/hostfile", "== hostfile"),
        RUN_A.replace("master-0.lm-horovod-job slots=1", "master-0.lm-horovod-job slots=2"),
        RUN_A.replace("(phase Running)", "(phase Scheduled)"),
        RUN_A + "== /etc/volcano/worker.host:\n   x\n",
        "\n".join(line for line in RUN_A.splitlines() if "2f7tx" not in line),
    ):
        assert script.normalise(script.transcript(changed)) != base, changed


def test_the_readme_has_the_marked_block() -> None:
    script = demo_transcript()
    block = script.readme_block(script.README.read_text())
    assert block.startswith("== kubectl apply")
    assert "== /etc/volcano/worker.host:" in block  # what the demo prints since round 9
