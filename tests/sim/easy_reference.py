"""Textbook EASY backfilling (Mu'alem and Feitelson, 2001), written apart from the model.

Deliberately plain and slow: at every instant a job is submitted or ends, the queue is scanned
from its head; the first job that does not fit gets a reservation at the *shadow time* (when
enough running jobs are expected to have ended, by start + requested time), and the *extra*
nodes are those free at the shadow time beyond what the head needs (every running job expected
to end by then counted). A later job starts now if it fits in the free nodes and either ends by
the shadow time or takes no more than the extra nodes. Nothing is cached between instants.
"""

from __future__ import annotations

import heapq


def easy_start_times(jobs, system_nodes: int) -> list[float]:
    """Start time of every job; ``jobs`` have ``submit``, ``nodes``, ``run_time``, ``limit``."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, i))
    start = [None] * len(jobs)
    running: list[tuple[float, float, int, int]] = []   # (end, expected end, nodes, job)
    ends: list[tuple[float, int]] = []                   # heap of (end, job)
    queue: list[int] = []
    free = system_nodes
    next_arrival = 0
    while next_arrival < len(order) or queue or running:
        candidates = []
        if next_arrival < len(order):
            candidates.append(jobs[order[next_arrival]].submit)
        if ends:
            candidates.append(ends[0][0])
        now = min(candidates)
        while ends and ends[0][0] == now:
            _, done = heapq.heappop(ends)
            running = [r for r in running if r[3] != done]
            free += jobs[done].nodes
        while next_arrival < len(order) and jobs[order[next_arrival]].submit == now:
            queue.append(order[next_arrival])
            next_arrival += 1

        def run(index):
            nonlocal free
            job = jobs[index]
            start[index] = now
            free -= job.nodes
            running.append((now + job.run_time, now + job.limit, job.nodes, index))
            heapq.heappush(ends, (now + job.run_time, index))

        while queue and jobs[queue[0]].nodes <= free:
            run(queue.pop(0))
        if not queue:
            continue
        head = jobs[queue[0]]
        available = free
        shadow = None
        for _, expected, nodes, _ in sorted(running, key=lambda r: (r[1], r[3])):
            available += nodes
            if available >= head.nodes:
                shadow = max(expected, now)
                break
        extra = free + sum(n for _, expected, n, _ in running if max(expected, now) <= shadow) \
            - head.nodes
        for index in list(queue[1:]):
            job = jobs[index]
            if job.nodes > free:
                continue
            if now + job.limit <= shadow:
                queue.remove(index)
                run(index)
            elif job.nodes <= extra:
                queue.remove(index)
                run(index)
                extra -= job.nodes
    return start
