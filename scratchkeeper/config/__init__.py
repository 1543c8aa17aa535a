"""The site configuration: one TOML file checked against one schema, defaults included.

The schema is the dataclasses of :mod:`.sections`; each field's ``metadata`` holds its
documentation and constraint, and :mod:`.values` the checks and parsers of single values.
:func:`load_config` (:mod:`.loader`) reads a file, rejects unknown keys and wrong values with
``FILE:LINE: key 'section.name': expected ..., got ...`` and fills in every default. Bottom
layer: imports only the exception root, the record decorator and the input-file reader.
"""

from .loader import (
    CONFIG_SIZE_MAX,
    DEFAULT_PATH,
    ENV_VAR,
    describe_schema,
    load_config,
    parse_config,
)
from .sections import (
    BurstBufferConfig,
    HeadConfig,
    LayoutConfig,
    LoggingConfig,
    MetricsConfig,
    MountConfig,
    PartitionReplication,
    QosConfig,
    RecoveryConfig,
    ReplicationConfig,
    RetryConfig,
    SchedulerConfig,
    SiteConfig,
    StagingConfig,
    StateConfig,
    StorageConfig,
    TemplatesConfig,
    TieringConfig,
    TransferConfig,
    tier_pools,
)
from .values import (
    DAY,
    SOCKET_PATH_MAX,
    SOURCE_SCHEMES,
    STRIPE_COUNT_MAX,
    STRIPE_SIZE_MAX,
    STRIPE_UNIT,
    listen_address,
    normal_path,
    parse_ost_ranges,
    slurm_time_seconds,
)

__all__ = [
    "CONFIG_SIZE_MAX", "DAY", "DEFAULT_PATH", "ENV_VAR", "SOCKET_PATH_MAX", "SOURCE_SCHEMES",
    "STRIPE_COUNT_MAX", "STRIPE_SIZE_MAX", "STRIPE_UNIT", "BurstBufferConfig", "HeadConfig",
    "LayoutConfig", "LoggingConfig", "MetricsConfig", "MountConfig", "PartitionReplication", "QosConfig",
    "RecoveryConfig", "ReplicationConfig", "RetryConfig", "SchedulerConfig", "SiteConfig",
    "StagingConfig", "StateConfig", "StorageConfig", "TemplatesConfig", "TieringConfig",
    "TransferConfig", "describe_schema", "listen_address", "load_config", "normal_path",
    "parse_config", "parse_ost_ranges", "slurm_time_seconds", "tier_pools",
]
