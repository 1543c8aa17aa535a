"""Where objects go: SUORA placement over performance tiers and its hotness table (the SUORA
paper, Zhou et al., 2022).

:mod:`.suora` maps an object id to targets (Algorithms 1 and 3), :mod:`.hotness` counts reads
and decides which replicas move up to a faster bucket or down to a slower one (section 3.3,
Algorithm 2), :mod:`.peers` holds the placements it is measured against (consistent hashing,
round-robin, CRUSH straw2 through ``crushtool``). Pure data in, plain data out; nothing here
touches a store.
"""

from .suora import Bucket, PlacementMap, PlacementTarget, Segment, TargetState

__all__ = ["Bucket", "PlacementMap", "PlacementTarget", "Segment", "TargetState"]
