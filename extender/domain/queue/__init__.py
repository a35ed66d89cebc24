"""Held gangs in queue order: the view of who wants which nodes (`held_queue`)
and the core part that plans the gangs ahead first (`gang_queue`).
"""
