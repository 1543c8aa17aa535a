"""What recovering one file did (:class:`Outcome`), and its states: the record the rebuild
(:mod:`.rebuilding`) fills in, the patch (:mod:`.patching`) adds its bytes to, and recoveryd
reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import plan as planning

# outcome states
WHOLE, PATCHED, LOST = "whole", "patched", "lost"


@dataclass
class Outcome:
    """What recovering one file did."""

    path: str
    state: str
    failed_osts: list[int] = field(default_factory=list)
    substitutes: dict[int, int] = field(default_factory=dict)
    patched_bytes: int = 0
    seconds: float = 0.0
    # of ``seconds``, what follows detection (the OST probe): substitute objects, connecting,
    # fetching, checking, writing, syncing, switching
    patch_seconds: float = 0.0
    verified: str = ""          # "blocks", "ranges", "file", or "" when nothing was patched
    reason: str = ""
    plan: planning.PatchPlan | None = None
    attempts: int = 0

    def to_dict(self) -> dict:
        return {"path": self.path, "state": self.state, "failed_osts": self.failed_osts,
                "substitutes": {str(k): v for k, v in self.substitutes.items()},
                "patched_bytes": self.patched_bytes, "seconds": round(self.seconds, 6),
                "patch_seconds": round(self.patch_seconds, 6),
                "verified": self.verified, "reason": self.reason, "attempts": self.attempts,
                "plan": self.plan.to_dict() if self.plan else None,
                "explain": self.plan.explain() if self.plan else ""}
