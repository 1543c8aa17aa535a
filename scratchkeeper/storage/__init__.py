"""The storage layer: one interface (:class:`StorageBackend`), two backends.

``open_backend(config)`` picks the backend named by ``storage.backend`` and runs no command;
the local store creates its directories and database on first use.
"""

from __future__ import annotations

from ..config import SiteConfig, tier_pools
from ..errors import ConfigError, InputError
from .base import (
    OST_ACTIVE,
    OST_FAILED,
    OST_INACTIVE,
    OST_UNREACHABLE,
    XATTR_PREFIX,
    XATTR_TRUSTED_NAMES,
    XATTR_USER_PREFIX,
    FileStat,
    OstStatus,
    Rebuild,
    ScratchPaths,
    StorageBackend,
    check_xattr_name,
)
from .layout import (
    Extent,
    FileLayout,
    LayoutComponent,
    LayoutRequest,
    StripeObject,
    merge_extents,
    parse_ost_list,
    parse_size,
    subtract_extents,
)

__all__ = [
    "OST_ACTIVE", "OST_FAILED", "OST_INACTIVE", "OST_UNREACHABLE", "XATTR_PREFIX",
    "XATTR_TRUSTED_NAMES", "XATTR_USER_PREFIX", "check_xattr_name", "Extent",
    "FileLayout", "FileStat", "LayoutComponent", "LayoutRequest", "OstStatus", "Rebuild",
    "ScratchPaths", "StorageBackend", "StripeObject", "merge_extents", "open_backend",
    "parse_ost_list", "parse_size", "subtract_extents",
]


def open_backend(config: SiteConfig) -> StorageBackend:
    """The storage backend the site configuration names (no command is run here)."""
    storage = config.storage
    if storage.stripe_size % 65536:
        raise ConfigError(f"key 'storage.stripe_size': expected a multiple of 65536, got "
                          f"{storage.stripe_size}", path=config.source)
    if storage.stripe_count == 0:
        raise ConfigError("key 'storage.stripe_count': expected >= 1 or -1, got 0",
                          path=config.source)
    if storage.backend == "lustre":
        from .lustre import LustreBackend
        return LustreBackend(storage.scratch_root, lfs=storage.lfs, lctl=storage.lctl,
                             state_database=config.state.database,
                             default_stripe_count=storage.stripe_count,
                             default_stripe_size=storage.stripe_size,
                             command_timeout=config.scheduler.command_timeout)
    from .local import LocalStripedStore
    pools = {}
    for name, members in storage.pools.items():
        try:
            pools[name] = parse_ost_list(members)
        except InputError as err:
            raise ConfigError(f"key 'storage.pools.{name}': {err}", path=config.source) from None
        outside = [i for i in pools[name] if i >= storage.ost_count]
        if outside:
            raise ConfigError(f"key 'storage.pools.{name}': OSTs {outside} beyond "
                              f"storage.ost_count = {storage.ost_count}", path=config.source)
    tiers = tier_pools(storage)
    classes: dict[int, str] = {}
    for tier, names in tiers:
        for name in names:
            for index in pools[name]:
                if classes.setdefault(index, tier) != tier:
                    raise ConfigError(f"key 'storage.pool_tiers': OST {index} is in pools of "
                                      f"classes {classes[index]} and {tier}; SUORA places an "
                                      "OST in one class", path=config.source)
    return LocalStripedStore(storage.scratch_root, storage.store_root,
                             ost_count=storage.ost_count,
                             default_stripe_count=storage.stripe_count,
                             default_stripe_size=storage.stripe_size, pools=pools,
                             placement=storage.placement, tiers=tiers)
