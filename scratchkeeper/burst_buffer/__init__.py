"""Slurm's own staging life cycle: the work behind ``slurm-plugins/burst_buffer.lua``.

Slurm's ``burst_buffer/lua`` plugin (``BurstBufferType=burst_buffer/lua``, ``Directive=STAGE``
in ``burst_buffer.conf``) hands a job whose script has ``#STAGEIN``/``#STAGEOUT`` lines to
``burst_buffer.lua``, which calls ``scratchkeeper bb STAGE`` for each state of the job's life
cycle (:mod:`.lifecycle`): stage-in while the job is pending, the recovery check before it
starts, stage-out while it still holds its nodes, teardown. The third path beside
``scratchkeeper submit`` and the chain service; it plans and submits through the planner, as
the chain service does, and keeps its own table (:mod:`.records`). docs/slurm-plugins.rst.
"""
