"""What a group's PodGroup status says (`status`), and the same in the schema
of scheduler-plugins and Volcano (`foreign_status`).
"""
