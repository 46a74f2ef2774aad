"""What a checkpoint's ``quantization_config`` (its HuggingFace config.json) says its weights,
activations and KV cache are, as vLLM 0.32 reads it without a ``--quantization`` flag.

One reader for both ways a checkpoint reaches llmsim: a scenario's ``model.hf_config``
(``models.from_hf_config``, ``scenario.apply_checkpoint``) and ``vllm serve /path/to/checkpoint``
(``vllmcli``). The formats, each as vLLM's quantisation config class reads it
(vllm/model_executor/layers/quantization/, 0.32.0):

- ``fp8`` (``Fp8Config``; DeepSeek-V3, Qwen3-FP8: e4m3 weights, per tensor or in 128 x 128
  blocks): FP8 weights, activations quantised to FP8 (W8A8) dynamically or with static scales.
- ``awq`` / ``gptq`` and their Marlin forms (``AWQConfig``, ``GPTQConfig``): ``bits``-bit integer
  weights in groups of ``group_size`` (-1: one scale per channel), 16-bit activations (W4A16).
- ``compressed-tensors`` (llm-compressor's checkpoints: RedHatAI / neuralmagic FP8, W8A8, W4A16,
  NVFP4; ``CompressedTensorsConfig._get_scheme_from_parts``): the ``weights`` and
  ``input_activations`` of its config groups, which must all agree here (a mixed-precision
  checkpoint is refused: set model.weight_dtype / act_dtype for the layers that dominate).
- ``modelopt`` / ``modelopt_fp4`` (NVIDIA TensorRT Model Optimizer; ``ModelOptFp8Config``,
  ``ModelOptNvFp4Config``): ``quant_algo`` FP8 (per tensor, per channel and token, or in blocks),
  NVFP4 (W4A4), W4A16_NVFP4 or MXFP8; its ``kv_cache_quant_algo`` FP8 is the KV cache dtype vLLM's
  ``--kv-cache-dtype auto`` takes (``vllm/utils/torch_utils.py resolve_kv_cache_dtype_string``).

Anything else (bitsandbytes, GGUF, ...) is refused, naming the field: priced as 16-bit weights it
would be a different model.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmsim.errors import UserError, cut


@dataclass(frozen=True)
class CheckpointQuant:
    """A checkpoint's precision as vLLM runs it. ``act_dtype`` "" is weight-only: the GEMMs compute
    in the model's 16-bit dtype (the weights dequantised in the kernel). ``group_size`` / ``scale_bits``
    None: the weight dtype's usual format (models.WEIGHT_GROUPS); 0 weights per scale: per channel.
    ``kv_dtype`` "": the model's dtype under ``--kv-cache-dtype auto``."""

    method: str
    weight_dtype: str
    act_dtype: str = ""
    group_size: int | None = None
    scale_bits: float | None = None
    kv_dtype: str = ""

    def describe(self) -> str:
        act = f"{self.act_dtype} compute" if self.act_dtype else "16-bit compute"
        kv = f", {self.kv_dtype} KV cache" if self.kv_dtype else ""
        return f"{self.method}: {self.weight_dtype} weights, {act}{kv}"


METHODS = ("awq", "awq_marlin", "compressed-tensors", "fp8", "gptq", "gptq_marlin", "modelopt", "modelopt_fp4")


def read_quant(cfg: dict, where: str) -> CheckpointQuant | None:
    """The precision a config.json's ``quantization_config`` gives (None: none there). ``where``
    names the file in errors."""
    if "quantization_config" not in cfg or cfg["quantization_config"] is None:
        return None
    q = cfg["quantization_config"]
    key = f"{where}: quantization_config"
    if not isinstance(q, dict):
        raise UserError(f"{key}: expected a mapping (quant_method and its settings), got {type(q).__name__}")
    method = q.get("quant_method")
    if method not in METHODS:
        raise UserError(
            f"{key}.quant_method {cut(repr(method), 40)}: llmsim reads {', '.join(METHODS)}; for another format "
            "set model.weight_dtype / act_dtype in a scenario"
        )
    if method == "fp8":
        return CheckpointQuant("fp8", "fp8", "fp8")
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        return _awq_gptq(q, str(method), key)
    if method == "compressed-tensors":
        return _compressed_tensors(q, key)
    return _modelopt(q, str(method), key)


def _int(q: dict, field: str, key: str, default: int | None = None) -> int | None:
    v = q.get(field, default)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise UserError(f"{key}.{field}: expected an integer, got {cut(repr(v), 40)}")
    return v


def _group(q: dict, key: str) -> int | None:
    """``group_size``: weights per scale; -1 (AWQ / GPTQ) and 0 mean one scale per channel."""
    size = _int(q, "group_size", key)
    if size is None:
        return None
    if size < -1:
        raise UserError(f"{key}.group_size: expected -1 (per channel) or a positive count, got {size}")
    return max(size, 0)


def _awq_gptq(q: dict, method: str, key: str) -> CheckpointQuant:
    bits = _int(q, "bits", key, 4)
    allowed = (4,) if method.startswith("awq") else (4, 8)  # (vLLM's AWQ kernels take 4-bit weights only)
    if bits not in allowed:
        read = "4-bit" if len(allowed) == 1 else "4- or 8-bit"
        raise UserError(f"{key}: {method} with bits {bits}: vLLM reads {read} weights")
    # AutoAWQ and AutoGPTQ store an fp16 scale and a zero point (packed 4-bit) per group: the
    # int4 default's 20 bits; a symmetric checkpoint (GPTQ sym true, AWQ zero_point false) has no zero point
    symmetric = q.get("sym") is True if method.startswith("gptq") else q.get("zero_point") is False
    scale = 16.0 if symmetric else None
    return CheckpointQuant(method, f"int{bits}", "", _group(q, key), scale)


# compressed-tensors' quantisation args -> llmsim's dtype: (type, num_bits) -> dtype
_CT_DTYPES = {("float", 8): "fp8", ("int", 8): "int8", ("int", 4): "int4", ("float", 4): "fp4"}


def _ct_dtype(args: object, key: str) -> tuple[str, dict]:
    """The dtype of one compressed-tensors ``weights`` / ``input_activations`` entry."""
    if not isinstance(args, dict):
        raise UserError(f"{key}: expected a mapping (num_bits, type, strategy, ...), got {type(args).__name__}")
    kind, bits = args.get("type", "int"), args.get("num_bits")
    if (kind, bits) not in _CT_DTYPES:
        raise UserError(
            f"{key}: type {cut(repr(kind), 20)} with num_bits {cut(repr(bits), 20)}: llmsim reads float 8 (FP8), "
            "int 8, int 4 and float 4 (NVFP4 / MXFP4)"
        )
    return _CT_DTYPES[(kind, bits)], args


def _compressed_tensors(q: dict, key: str) -> CheckpointQuant:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise UserError(f"{key}.config_groups: expected a mapping of one or more quantisation groups")
    schemes = {}
    for name, group in groups.items():
        gkey = f"{key}.config_groups.{name}"
        if not isinstance(group, dict) or "weights" not in group:
            raise UserError(f"{gkey}: expected a mapping with `weights` (and `input_activations`)")
        weight, wargs = _ct_dtype(group["weights"], f"{gkey}.weights")
        acts = group.get("input_activations")
        act = _ct_dtype(acts, f"{gkey}.input_activations")[0] if acts is not None else ""
        strategy = wargs.get("strategy")
        size = _int(wargs, "group_size", f"{gkey}.weights") if strategy in ("group", "tensor_group") else 0
        # a symmetric group scale is 16 bits (fp16 / bf16; NVFP4's and MXFP4's are 8-bit: their defaults)
        scale = 16.0 if weight in ("int4", "int8") and size and wargs.get("symmetric", True) else None
        if weight == "fp4":
            scale = None if size == 16 else 8.0  # NVFP4: an E4M3 scale per 16; MXFP4: an E8M0 per 32
        schemes[name] = (weight, act, size, scale)
    if len(set(schemes.values())) > 1:
        listed = "; ".join(f"{n}: {w} weights, {a or '16-bit'} compute" for n, (w, a, _, _) in schemes.items())
        raise UserError(
            f"{key}.config_groups: the groups quantise layers differently ({listed}); llmsim prices one precision "
            "per model: set model.weight_dtype / act_dtype in a scenario for the layers that dominate"
        )
    weight, act, size, scale = next(iter(schemes.values()))
    if act == "int4":  # (vLLM's W4A4 integer scheme: llmsim has no 4-bit integer matrix units)
        raise UserError(
            f"{key}: 4-bit integer activations (W4A4 INT) are not modelled; llmsim computes in fp8, int8, fp4"
        )
    return CheckpointQuant("compressed-tensors", weight, act, size, scale)


# ModelOpt's quant_algo -> (weights, compute, weights per scale, scale bits)
_MODELOPT = {
    "FP8": ("fp8", "fp8", None, None),
    "FP8_PER_CHANNEL_PER_TOKEN": ("fp8", "fp8", None, None),
    "FP8_PB_WO": ("fp8", "fp8", None, None),
    "NVFP4": ("fp4", "fp4", None, None),
    "W4A16_NVFP4": ("fp4", "", None, None),
    "MXFP8": ("fp8", "fp8", 32, 8.0),  # e4m3 weights, an E8M0 scale per 32
}


def _modelopt(q: dict, method: str, key: str) -> CheckpointQuant:
    inner = q.get("quantization") if isinstance(q.get("quantization"), dict) else q
    algo = inner.get("quant_algo")
    if not isinstance(algo, str) or algo.upper() not in _MODELOPT:
        raise UserError(
            f"{key}.quant_algo {cut(repr(algo), 40)}: llmsim reads {', '.join(_MODELOPT)} (a MIXED_PRECISION "
            "checkpoint: set model.weight_dtype / act_dtype in a scenario)"
        )
    weight, act, size, scale = _MODELOPT[algo.upper()]
    return CheckpointQuant(method, weight, act, size, scale, _modelopt_kv(inner, q, key))


def _modelopt_kv(inner: dict, q: dict, key: str) -> str:
    """The KV cache dtype ``--kv-cache-dtype auto`` takes from a ModelOpt checkpoint: its
    ``kv_cache_quant_algo`` (or ``kv_cache_scheme``) FP8; "" for none."""
    kv = inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
    kv = kv or q.get("kv_cache_quant_algo")
    if kv is None:
        return ""
    if isinstance(kv, dict):
        if kv.get("type") == "float" and kv.get("num_bits") == 8:
            return "fp8"
        if kv.get("type") == "float" and kv.get("num_bits") == 4:
            raise UserError(f"{key}: kv_cache_scheme: an NVFP4 KV cache is not modelled (llmsim's: bf16, fp16, fp8)")
        return ""  # (vLLM falls back to auto, with a warning)
    if isinstance(kv, str) and kv.lower() in ("fp8", "fp8_e4m3"):
        return "fp8"
    if isinstance(kv, str) and "fp4" in kv.lower():
        raise UserError(f"{key}: kv_cache_quant_algo {cut(repr(kv), 20)}: an NVFP4 KV cache is not modelled")
    return ""
