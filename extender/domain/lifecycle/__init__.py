"""After placement: a gang's restart and abort policies (`lifecycle_policy`)
and what they decide for failed, lost or preempted members (`lifecycle`).
"""
