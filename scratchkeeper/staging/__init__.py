"""Just-in-time stage-in and offload at close (seed 004 sections 4.4 and 4.9, future work there).

:mod:`.predict` predicts a stage-in's transfer time from its sources' sizes and the throughput
learned from the project's own recorded transfers; :mod:`.jit` holds a stage-in job back until
the compute job's expected start minus that time and a margin, and moves it as the queue moves;
:mod:`.records` keeps both in the state database.
"""
