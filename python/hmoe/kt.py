"""kt.py - KTMoEWrapper: kt-kernel's interface (as SGLang's kt_ep_wrapper and InfiniLM call it)
over hmoe's expert engine, so that those frameworks run their CPU experts on hmoe by changing one
import:

    from hmoe import KTMoEWrapper, generate_gpu_experts_masks   # instead of kt_kernel

What differs from kt-kernel, on purpose:
  * every wrapper owns its engine and thread pool (no process-wide CPUInfer singleton that a
    second model would share);
  * dtype, device, shapes and the tensor-parallel split are checked with errors that name the
    argument: an FP16 tensor is never read as BF16, a partition of the intermediate size is not
    taken for the whole;
  * any intermediate size works (kt-kernel's LLAMAFILE path needs a multiple of 256);
  * method LLAMAFILE reads the GGUF as it is; BF16 and FP8 read the Hugging Face directory
    (FP8 with its 128x128 block scales); AMXINT8 / AMXINT4 take either and keep hmoe's own int8
    copy of the experts for prompt batches (kt-kernel's converted directories are not read).
Torch is used when the tensors are torch tensors and never imported otherwise (numpy arrays and
anything with __dlpack__ work too).
"""
import os

from ._hmoe import MoE

_METHODS = ("LLAMAFILE", "BF16", "FP8", "FP8_PERCHANNEL", "AMXINT8", "AMXINT4", "RAWINT4")


def _is_torch(t):
    return type(t).__module__.startswith("torch")


def _model_file(path, method):
    """the GGUF file of a LLAMAFILE path (a file, or a directory holding one), else the path"""
    if method == "LLAMAFILE" and os.path.isdir(path):
        ggufs = sorted(f for f in os.listdir(path) if f.endswith(".gguf"))
        if len(ggufs) != 1:
            raise ValueError(f"weight_path {path}: LLAMAFILE needs one .gguf file there "
                             f"(found {len(ggufs)}); give the file itself")
        return os.path.join(path, ggufs[0])
    return path


class KTMoEWrapper:
    """One MoE layer's routed experts on the CPU (see the module's docstring)."""

    _capture_batch_sizes = []

    def __init__(self, layer_idx, num_experts, num_experts_per_tok, hidden_size,
                 moe_intermediate_size, gpu_experts_mask=None, cpuinfer_threads=0,
                 threadpool_count=1, weight_path=None, chunked_prefill_size=512, cpu_save=False,
                 max_deferred_experts_per_token=None, method="LLAMAFILE", num_gpu_experts=None,
                 mode="inference", swiglu_limit=0.0, swiglu_alpha=0.0, numa_nodes=None, **kwargs):
        for name, v in (("layer_idx", layer_idx), ("num_experts", num_experts),
                        ("num_experts_per_tok", num_experts_per_tok), ("hidden_size", hidden_size),
                        ("moe_intermediate_size", moe_intermediate_size),
                        ("chunked_prefill_size", chunked_prefill_size)):
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "layer_idx" else 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if method not in _METHODS:
            raise ValueError(f"method {method!r}: expected one of {', '.join(_METHODS)}")
        if mode != "inference":
            raise NotImplementedError(f"mode {mode!r}: hmoe's wrapper runs inference only")
        if max_deferred_experts_per_token:
            raise NotImplementedError("max_deferred_experts_per_token > 0: expert deferral is not "
                                      "offered by this wrapper yet (pass 0 or None)")
        if swiglu_limit or swiglu_alpha:
            raise NotImplementedError("swiglu_limit / swiglu_alpha (gpt-oss): not offered by this "
                                      "wrapper yet")
        if not isinstance(cpuinfer_threads, int) or cpuinfer_threads < 0:
            raise ValueError(f"cpuinfer_threads must be >= 0, got {cpuinfer_threads!r}")
        if threadpool_count < 1 or (cpuinfer_threads and cpuinfer_threads < threadpool_count):
            raise ValueError(f"threadpool_count {threadpool_count} must be in [1, cpuinfer_threads]")
        self.layer_idx = layer_idx
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.hidden_size = hidden_size
        self.moe_intermediate_size = moe_intermediate_size
        self.cpuinfer_threads = cpuinfer_threads
        self.threadpool_count = threadpool_count
        self.weight_path = weight_path
        self.chunked_prefill_size = chunked_prefill_size
        self.method = method
        self.gpu_experts_mask = self._make_mask(gpu_experts_mask, num_gpu_experts)
        self._applied_mask = None
        self._moe = None
        self._buffers = {}  # batch size -> pinned/host buffers (stable addresses: CUDA graphs)
        self._out = None
        self._stream_pending = False

    # ---- the mask ---------------------------------------------------------------------------
    def _make_mask(self, mask, num_gpu_experts):
        if mask is not None and num_gpu_experts is not None:
            raise ValueError("give gpu_experts_mask or num_gpu_experts, not both")
        if mask is None:
            n = num_gpu_experts or 0
            if not 0 <= n <= self.num_experts:
                raise ValueError(f"num_gpu_experts {n} is outside [0, {self.num_experts}]")
            flags = [i < n for i in range(self.num_experts)]
            try:
                import torch
                return torch.tensor(flags, dtype=torch.bool)
            except ImportError:
                import numpy
                return numpy.array(flags, dtype=bool)
        shape = tuple(mask.shape)
        if shape != (self.num_experts,):
            raise ValueError(f"gpu_experts_mask has shape {list(shape)}; expected [{self.num_experts}]")
        if _is_torch(mask):
            import torch
            if mask.dtype != torch.bool:
                raise TypeError(f"gpu_experts_mask is {mask.dtype}; expected torch.bool")
            return mask.detach().to("cpu", copy=True).contiguous()  # updated in place by callers
        import numpy
        return numpy.array(mask, dtype=bool)

    def _mask_bytes(self):
        m = self.gpu_experts_mask
        return bytes(m.to(dtype=__import__("torch").uint8).tolist()) if _is_torch(m) else \
            bytes(int(x) for x in m)

    # ---- weights ----------------------------------------------------------------------------
    def load_weights(self, physical_to_logical_map_cpu=None):
        """Maps the layer's experts from weight_path (physical expert i computes logical expert
        map[i]; None or the identity for most models)."""
        if self.weight_path is None:
            raise ValueError("weight_path was not given: use load_weights_from_tensors")
        path = _model_file(self.weight_path, self.method)
        emap = self._map(physical_to_logical_map_cpu)
        self._applied_mask = self._mask_bytes()
        self._moe = MoE(path, self.layer_idx, self.cpuinfer_threads, mask=self._applied_mask,
                        repack=self.method.startswith("AMX"), expert_map=emap)
        self._check_shapes()

    def load_weights_from_tensors(self, gate_proj, up_proj, down_proj,
                                  physical_to_logical_map_cpu=None):
        """gate/up [experts][intermediate][hidden], down [experts][hidden][intermediate]: float32
        or bfloat16 CPU tensors, used in place (keep them alive)."""
        emap = self._map(physical_to_logical_map_cpu)
        if emap is not None:
            gate_proj, up_proj, down_proj = (t[list(emap)] for t in (gate_proj, up_proj, down_proj))
        self._applied_mask = self._mask_bytes()
        self._weights = (gate_proj, up_proj, down_proj)
        self._moe = MoE.from_tensors(gate_proj, up_proj, down_proj, self.cpuinfer_threads,
                                     mask=self._applied_mask)
        self._check_shapes(top_k=False)

    def _map(self, m):
        if m is None:
            return None
        ids = [int(x) for x in (m.tolist() if hasattr(m, "tolist") else m)]
        if len(ids) != self.num_experts:
            raise ValueError(f"physical_to_logical_map has {len(ids)} entries; expected {self.num_experts}")
        return None if ids == list(range(self.num_experts)) else ids

    def _check_shapes(self, top_k=True):
        m = self._moe
        if m.num_experts != self.num_experts:
            raise ValueError(f"num_experts {self.num_experts}, but the weights have {m.num_experts}")
        if m.hidden_size != self.hidden_size:
            raise ValueError(f"hidden_size {self.hidden_size}, but the weights have {m.hidden_size}")
        if m.intermediate_size != self.moe_intermediate_size:
            hint = ""
            if m.intermediate_size % self.moe_intermediate_size == 0:
                hint = (f" ({m.intermediate_size // self.moe_intermediate_size} x yours: pass the "
                        "full size, not one tensor-parallel rank's partition)")
            raise ValueError(f"moe_intermediate_size {self.moe_intermediate_size}, but the weights "
                             f"have {m.intermediate_size}{hint}")
        if top_k and m.num_experts_per_tok != self.num_experts_per_tok:
            raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok}, but the model says "
                             f"{m.num_experts_per_tok}")

    # ---- forward ----------------------------------------------------------------------------
    def _engine(self):
        if self._moe is None:
            raise RuntimeError("load_weights() first")
        return self._moe

    def _mask_if_changed(self):
        cur = self._mask_bytes()
        if cur == self._applied_mask:
            return None
        self._applied_mask = cur
        return cur

    def _check_inputs(self, h, ids, w):
        n = h.shape[0] if len(h.shape) == 2 else None
        if n is None or h.shape[1] != self.hidden_size:
            raise ValueError(f"hidden_states has shape {list(h.shape)}; expected [tokens, {self.hidden_size}]")
        if tuple(ids.shape) != (n, self.num_experts_per_tok) or tuple(w.shape) != tuple(ids.shape):
            raise ValueError(f"topk_ids {list(ids.shape)} and topk_weights {list(w.shape)} must both "
                             f"be [{n}, {self.num_experts_per_tok}]")
        if n > self.chunked_prefill_size:
            raise ValueError(f"{n} tokens in one call; chunked_prefill_size is {self.chunked_prefill_size}")
        return n

    def _host_buffers(self, h, ids, w):
        """persistent pinned buffers of one batch size (the inputs' copies and the output)"""
        import torch
        n = h.shape[0]
        b = self._buffers.get(n)
        if b is None or b[0].dtype != h.dtype or b[1].dtype != ids.dtype or b[2].dtype != w.dtype:
            pin = torch.cuda.is_available()
            mk = lambda shape, dt: torch.empty(shape, dtype=dt, pin_memory=pin)  # noqa: E731
            b = (mk(h.shape, h.dtype), mk(ids.shape, ids.dtype), mk(w.shape, w.dtype),
                 mk(h.shape, h.dtype), torch.empty(h.shape, dtype=h.dtype, device=h.device))
            self._buffers[n] = b
        return b

    def submit_forward(self, hidden_states, topk_ids, topk_weights, cuda_stream=None, **kwargs):
        """Starts the CPU experts of a batch: ids of -1 and experts in gpu_experts_mask are
        skipped; the weights are applied as given (no routed scaling)."""
        moe = self._engine()
        h = hidden_states.reshape(-1, self.hidden_size) if hasattr(hidden_states, "reshape") else hidden_states
        n = self._check_inputs(h, topk_ids, topk_weights)
        on_gpu = _is_torch(h) and h.is_cuda
        if on_gpu:
            import torch
            if cuda_stream is None:
                cuda_stream = torch.cuda.current_stream(h.device).cuda_stream
            hx, hi, hw, ho, go = self._host_buffers(h, topk_ids, topk_weights)
            stream = torch.cuda.ExternalStream(cuda_stream, device=h.device)
            with torch.cuda.stream(stream):
                hx.copy_(h, non_blocking=True)
                hi.copy_(topk_ids, non_blocking=True)
                hw.copy_(topk_weights, non_blocking=True)
            moe.submit_on_stream(cuda_stream, hx, hi, hw, ho, mask=self._mask_if_changed())
            self._out = (ho, go, cuda_stream, n)
            return
        mask = self._mask_if_changed()
        if mask is not None:
            moe.set_mask(mask)
        if _is_torch(h):
            import torch
            out = torch.empty(h.shape, dtype=h.dtype)
        else:
            import numpy
            out = numpy.empty(h.shape, dtype=numpy.float32)
        moe.submit(h, topk_ids, topk_weights, out)
        self._out = (out, None, None, n)
        self._inputs = (h, topk_ids, topk_weights)  # alive until sync

    def sync_forward(self, hidden_states=None, cuda_stream=None):
        """The CPU experts' weighted sum [tokens][hidden]: on the GPU (in stream order, a buffer
        reused by the next call of the same batch size) for GPU inputs, else on the CPU."""
        if self._out is None:
            raise RuntimeError("sync_forward without submit_forward")
        out, gpu_out, stream_handle, n = self._out
        self._out = None
        moe = self._engine()
        if gpu_out is None:
            moe.wait()
            self._inputs = None
            return out
        import torch
        moe.wait_on_stream(stream_handle)
        stream = torch.cuda.ExternalStream(stream_handle, device=gpu_out.device)
        with torch.cuda.stream(stream):
            gpu_out.copy_(out, non_blocking=True)
        return gpu_out

    def forward(self, hidden_states, topk_ids, topk_weights, cuda_stream=None):
        self.submit_forward(hidden_states, topk_ids, topk_weights, cuda_stream)
        return self.sync_forward(hidden_states, cuda_stream)

    # ---- CUDA graph buffers (kt-kernel's static methods) --------------------------------------
    @staticmethod
    def set_capture_batch_sizes(sizes):
        KTMoEWrapper._capture_batch_sizes = list(sizes)

    @staticmethod
    def get_capture_batch_sizes():
        return list(KTMoEWrapper._capture_batch_sizes)

    @staticmethod
    def clear_buffer_cache():
        """Buffers belong to each wrapper (dropped with it); kept for kt-kernel's interface."""


def generate_gpu_experts_masks(activation_freq, num_gpu_experts):
    """kt-kernel's helper: the num_gpu_experts most activated (layer, expert) pairs of a
    [layers][experts] frequency table, as a bool mask of the same shape (all False for 0)."""
    import torch
    freq = torch.as_tensor(activation_freq)
    if freq.dim() != 2:
        raise ValueError(f"activation_freq has shape {list(freq.shape)}; expected [layers, experts]")
    k = max(0, min(int(num_gpu_experts), freq.numel()))
    mask = torch.zeros(freq.numel(), dtype=torch.bool)
    if k:
        mask[torch.topk(freq.flatten().to(torch.float64), k).indices] = True
    return mask.view(freq.shape)
