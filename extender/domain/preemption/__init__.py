"""Gang preemption: which victims make a gang fit (`preemption`, pure) and the
core part that plans on the room they free (`gang_preemption`).
"""
