"""Plans when the writer changes: recovered from the planned-node annotations
(`recovery`) and the core part that restores or drops them (`gang_failover`).
"""
