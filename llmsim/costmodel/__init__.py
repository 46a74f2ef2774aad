"""Cost model: op lists (ops.py), roofline pricing (roofline.py), collectives (comm.py)."""

from llmsim.costmodel.ops import BatchShape, Op, OpConfig, batch_shape, step_ops
from llmsim.costmodel.roofline import CostConfig, CostModel, OpTime

__all__ = ["BatchShape", "CostConfig", "CostModel", "Op", "OpConfig", "OpTime", "batch_shape", "step_ops"]
