"""hmoe - hmoe's CPU expert engine for GPU frameworks: `MoE` (one layer's routed experts, tensors
taken zero-copy through DLPack or the buffer protocol) and `KTMoEWrapper`, kt-kernel's interface
over it (docs/python.md). Importing it needs neither torch nor numpy."""
from ._hmoe import MoE, version
from .kt import KTMoEWrapper, generate_gpu_experts_masks

__all__ = ["MoE", "KTMoEWrapper", "generate_gpu_experts_masks", "version"]
