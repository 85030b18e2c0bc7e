"""A drop-in for ``flashinfer.mla.BatchMLAPagedAttentionWrapper`` on this package's shapes.

Code written against FlashInfer switches by changing one import::

    from mla_prefill.flashinfer_compat import BatchMLAPagedAttentionWrapper

The constructor, ``plan`` and ``run`` take FlashInfer's arguments (its legacy positional order
included) for what this kernel computes: 16 query heads, ``head_dim_ckv`` 512, ``head_dim_kpe``
64, page size 1, causal, bf16. Anything else raises ``NotImplementedError`` naming what is
supported, never a silent wrong answer. ``lse`` is base 2, as FlashInfer's. Planning and running
go through ``serving.MLAPrefillPlan``.
"""

from typing import Optional, Tuple, Union

import torch

from mla_prefill.kernel.validate import HEAD_DIM_CKV, HEAD_DIM_KPE, NUM_QO_HEADS, PAGE_SIZE
from mla_prefill.serving import MLAPrefillPlan

SUPPORTED = (
    f"num_heads {NUM_QO_HEADS}, head_dim_ckv {HEAD_DIM_CKV}, head_dim_kpe {HEAD_DIM_KPE}, "
    f"page_size {PAGE_SIZE}, causal=True, bf16 queries and caches"
)


class BatchMLAPagedAttentionWrapper:
    """FlashInfer's MLA paged-attention wrapper, run by this package's kernels."""

    def __init__(
        self,
        float_workspace_buffer: torch.Tensor,
        use_cuda_graph: bool = False,
        qo_indptr: Optional[torch.Tensor] = None,
        kv_indptr: Optional[torch.Tensor] = None,
        kv_indices: Optional[torch.Tensor] = None,
        kv_len_arr: Optional[torch.Tensor] = None,
        backend: str = "auto",
    ) -> None:
        """``float_workspace_buffer`` names the device (this kernel keeps its own, smaller
        split buffers); with ``use_cuda_graph`` the index buffers are the ones every ``plan``
        copies into, as FlashInfer's graph mode requires."""
        buffers = None
        if use_cuda_graph:
            if qo_indptr is None or kv_indptr is None or kv_indices is None:
                raise ValueError(
                    "use_cuda_graph=True needs the qo_indptr, kv_indptr and kv_indices buffers"
                )
            buffers = (qo_indptr, kv_indptr, kv_indices)
        self._device = float_workspace_buffer.device
        self._plan = MLAPrefillPlan(self._device, index_buffers=buffers)
        self._backend = "mla-prefill"

    def plan(
        self,
        qo_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        kv_indices: torch.Tensor,
        kv_len_arr: Optional[torch.Tensor] = None,
        num_heads: int = NUM_QO_HEADS,
        head_dim_ckv: int = HEAD_DIM_CKV,
        head_dim_kpe: int = HEAD_DIM_KPE,
        page_size: int = PAGE_SIZE,
        causal: bool = True,
        sm_scale: Optional[float] = None,
        q_data_type: torch.dtype = torch.bfloat16,
        kv_data_type: torch.dtype = torch.bfloat16,
        use_profiler: bool = False,
    ) -> None:
        got = (num_heads, head_dim_ckv, head_dim_kpe, page_size, bool(causal), q_data_type,
               kv_data_type)  # fmt: skip
        want = (NUM_QO_HEADS, HEAD_DIM_CKV, HEAD_DIM_KPE, PAGE_SIZE, True, torch.bfloat16,
                torch.bfloat16)  # fmt: skip
        if got != want:
            raise NotImplementedError(f"mla-prefill runs {SUPPORTED}; plan() asked for {got}")
        if use_profiler:
            raise NotImplementedError("use_profiler: FlashInfer's profiler buffer is not kept")
        if sm_scale is None:
            raise ValueError("sm_scale: pass the softmax scale (1/sqrt(192) for DeepSeek-V3)")
        self._plan.plan(qo_indptr, kv_indptr, kv_indices, sm_scale)

    def run(
        self,
        q_nope: torch.Tensor,
        q_pe: torch.Tensor,
        ckv_cache: torch.Tensor,
        kpe_cache: torch.Tensor,
        out: Optional[torch.Tensor] = None,
        lse: Optional[torch.Tensor] = None,
        return_lse: bool = False,
    ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        o, s = self._plan.run(q_nope, q_pe, ckv_cache, kpe_cache, out, lse)
        return (o, s) if return_lse else o
