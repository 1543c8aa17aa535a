"""The chain service (``scratchkeeper spank chain --watch``, run by root): the sweep that
chains data jobs to the compute jobs job_submit.lua held, and looks after every chain's life.

Each sweep (:mod:`.sweep`) does four things, none waiting on another's failure:

* :mod:`.attach`: plan each held job's script with the planner, submit its data jobs on its
  owner's behalf, make it depend on its stage-in and release it (also the hand-over of
  ``scratchkeeper submit`` with ``scheduler.submit_via = "chain-service"``);
* :mod:`.settle`: end the chains whose stage-in ended any way but success;
* :mod:`scratchkeeper.planner.jit`: start or move the just-in-time stage-ins held back;
* :mod:`.offload`: offload at close, each result sent away once closed after writing.

It sits above the planner (it plans and submits through it, and reads and writes the chain
tables only through :mod:`scratchkeeper.planner.records`) and below the command line.
"""
