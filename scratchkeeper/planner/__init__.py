"""The planner: a batch script with data directives becomes chained data and compute jobs.

script -> :mod:`directives` (ParsedScript) -> :mod:`plan` (Plan) -> :mod:`render` (scripts)
-> :mod:`submit` (scheduler commands, state).
"""
