"""The gang core: `GangCore` (`gang`, whose docstring is the map of the decision
order) wires the parts below; the filter's steps (`gang_filter`, `gang_planning`),
the watch, the bind barrier, and `core_api`, what the edges may call.
"""
