"""Read QoS: design-theoretic replica placement, admission per interval and retrieval (the flash
QoS paper, Altıparmak and Tosun).

designs (checked (N, c, 1) block designs) -> placement (bucket -> copies' devices, data block ->
bucket) -> retrieval (which copy to read: per interval, online, optimal via the solver) and
admission (how many requests an interval takes); fim maps blocks read together apart; traces
reads Darshan DXT logs and simulate replays requests on simulated devices. See docs/qos.rst.
"""
