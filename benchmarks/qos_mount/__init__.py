"""Read QoS measured on the mount with real reads (issue 21): ``python -m benchmarks.qos_mount``.

``params`` (the fixed parameters and the plan), ``rig`` (the OSTs, the mount, the files),
``measure`` (the calibration and the runs), ``reader`` (the reads, in the memory cgroup),
``analysis`` and ``report`` (the plot and the report's sections); ``__main__`` runs them, or
renders the report again from a results JSON (``--render``)."""
