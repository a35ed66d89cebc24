"""Starvation: the nodes a starving gang reserves (`reservations`), the
placeholder pods that hold them (`placeholders`), and the core part that starts,
moves and ends reservations (`gang_starvation`).
"""
