"""What the API objects say, parsed and bounded: quantities, pods and nodes
(`model`), group membership and a group's spec, the policy, the size limits.
No state.
"""
