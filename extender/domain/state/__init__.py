"""What the gang core's parts share (`gang_state`: the per-group records, the
snapshot, ledger and effects), the room they plan in (`gang_room`), and the
verdicts and effects the core returns (`decisions`).
"""
