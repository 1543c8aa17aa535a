"""Layout advice: the cost model of the layout paper (Song et al., HPDC'11) for the 1-DV, 1-DH
and 2-D layouts (``model``), the choice for a workload and its Lustre stripe settings
(``advise``), workloads read from Darshan logs (``darshan``, needs PyDarshan) and the
measurement of the model's constants (``calibrate``). Pure functions over dataclasses: the
planner and the CLI call them."""

from .advise import (
                     AccessClass,
                     Advice,
                     LayoutEstimate,
                     Workload,
                     advise,
                     estimate,
                     format_size,
                     stripe_settings,
                     workload_cost,
)
from .model import (
                     LAYOUTS,
                     ONE_DH,
                     ONE_DV,
                     RANDOM,
                     READ,
                     SEQUENTIAL,
                     TWO_D,
                     WRITE,
                     Cost,
                     ModelParams,
                     params_from_config,
                     request_cost,
)

__all__ = ["AccessClass", "Advice", "Cost", "LAYOUTS", "LayoutEstimate", "ModelParams",
           "ONE_DH", "ONE_DV", "RANDOM", "READ", "SEQUENTIAL", "TWO_D", "WRITE", "Workload",
           "advise", "estimate", "format_size", "params_from_config", "request_cost",
           "stripe_settings", "workload_cost"]
