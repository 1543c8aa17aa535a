"""The planner: a batch script with data directives becomes chained data and compute jobs.

script -> :mod:`directives` (ParsedScript) -> :mod:`plan` (Plan) -> :mod:`render` (scripts)
-> :mod:`submit` (scheduler commands, state). Beside the flow: :mod:`spool` (where a chain's
scripts and logs live), :mod:`predict` and :mod:`jit` (when a ``-start jit`` stage-in starts),
:mod:`commit` (what a data job reports), :mod:`status`, and :mod:`records`, the only module
that reads or writes the chain tables.
"""
