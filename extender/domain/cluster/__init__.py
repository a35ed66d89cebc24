"""The cluster as the core holds it: the snapshot of nodes, pods and groups,
the ledger of plans, fence taints, and the PodGroups of other schedulers.
"""
