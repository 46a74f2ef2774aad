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
- ``modelopt`` / ``modelopt_fp4`` / ``modelopt_mxfp8`` / ``mxfp8`` (NVIDIA TensorRT Model Optimizer;
  ``ModelOptFp8Config``, ``ModelOptNvFp4Config``, ``ModelOptMxFp8Config``): ``quant_algo`` FP8 (per
  tensor, per channel and token, or in blocks), NVFP4 (W4A4; W4A16 where its groups quantise no
  activations), W4A16_NVFP4 or MXFP8; its static FP8 ``kv_cache_quant_algo`` / ``kv_cache_scheme``
  is the KV cache dtype vLLM's ``--kv-cache-dtype auto`` takes (``vllm/utils/torch_utils.py
  resolve_kv_cache_dtype_string``), as is a compressed-tensors checkpoint's ``kv_cache_scheme``.

W4A8 with FP8 activations (compressed-tensors) is a Hopper-only kernel in vLLM (exactly SM 9.0);
llmsim prices it wherever the device computes in FP8.

Anything else (bitsandbytes, GGUF, ...) is refused, naming the field: priced as 16-bit weights it
would be a different model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

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


METHODS = (
    *("awq", "awq_marlin", "compressed-tensors", "fp8", "gptq", "gptq_marlin"),
    *("modelopt", "modelopt_fp4", "modelopt_mxfp8", "mxfp8"),
)
LEGACY_MODELOPT_FILE = "hf_quant_config.json"  # ModelOpt <= 0.29 wrote its config beside config.json


def read_quant(cfg: dict, where: str, folder: Path | None = None) -> CheckpointQuant | None:
    """The precision a config.json gives (None: none), found where vLLM looks
    (vllm/transformers_utils/config.py, model_arch_config_convertor.py): its ``quantization_config``,
    else an older compressed-tensors checkpoint's ``compression_config``, else a ModelOpt <= 0.29
    checkpoint's ``hf_quant_config.json`` in ``folder``; its method lower-cased, ``compressed_tensors``
    read as ``compressed-tensors``, a ModelOpt producer's as ``modelopt``. ``where`` names the file."""
    name = "quantization_config" if cfg.get("quantization_config") is not None else "compression_config"
    q = cfg.get(name)
    key = f"{where}: {name}"
    if q is None and folder is not None and (folder / LEGACY_MODELOPT_FILE).is_file():
        from llmsim.errors import load_json_object

        q, key = load_json_object(folder / LEGACY_MODELOPT_FILE, "model.hf_config"), str(folder / LEGACY_MODELOPT_FILE)
    if q is None:
        return None
    if not isinstance(q, dict):
        raise UserError(f"{key}: expected a mapping (quant_method and its settings), got {type(q).__name__}")
    method = q.get("quant_method")
    producer = q.get("producer")
    if method is None and isinstance(producer, dict) and producer.get("name") == "modelopt":
        method = "modelopt"
    if isinstance(method, str):
        method = method.lower().replace("compressed_tensors", "compressed-tensors")
    if method not in METHODS:
        raise UserError(
            f"{key}.quant_method {cut(repr(method), 40)}: llmsim reads {', '.join(METHODS)}; for another format "
            "set model.weight_dtype / act_dtype in a scenario"
        )
    if method == "fp8":
        # (Fp8Config.from_config: ignored_layers, else modules_to_not_convert; exact module names)
        field = "ignored_layers" if q.get("ignored_layers") else "modules_to_not_convert"
        _check_whole(q.get(field), f"{key}.{field}", "exact module names", _layers(cfg))
        return CheckpointQuant("fp8", "fp8", "fp8")
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        return _awq_gptq(q, str(method), key, _layers(cfg))
    if method == "compressed-tensors":
        return _compressed_tensors(q, key, _layers(cfg))
    return _modelopt(q, str(method), key, _layers(cfg))


def _int(q: dict, field: str, key: str, default: int | None = None) -> int | None:
    v = q.get(field, default)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise UserError(f"{key}.{field}: expected an integer, got {cut(repr(v), 40)}")
    return v


def _group(q: dict, key: str, field: str = "group_size") -> int | None:
    """``group_size`` (or AutoAWQ's ``q_group_size``): weights per scale; -1 (AWQ / GPTQ) and 0
    mean one scale per channel."""
    size = _int(q, field, key)
    if size is None:
        return None
    if not -1 <= size <= MAX_GROUP:
        raise UserError(
            f"{key}.{field}: expected -1 (per channel) or a count up to {MAX_GROUP:,}, got {cut(str(size), 40)}"
        )
    return max(size, 0)


MAX_GROUP = 1 << 20  # weights per scale, as a scenario's model.weight_group_size allows


def _layers(cfg: dict) -> int:
    """The decoder's layer count, where the config says it (0: not said)."""
    n = cfg.get("num_hidden_layers", cfg.get("n_layer", 0))
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def _awq_gptq(q: dict, method: str, key: str, layers: int = 0) -> CheckpointQuant:
    awq = method.startswith("awq")
    # (AutoAWQConfig.from_config reads w_bit or bits, q_group_size or group_size)
    bits = _int(q, "w_bit", key) if awq and "w_bit" in q else _int(q, "bits", key, 4)
    allowed = (4,) if awq else (4, 8)  # (vLLM's AWQ kernels take 4-bit weights only)
    if bits not in allowed:
        read = "4-bit" if len(allowed) == 1 else "4- or 8-bit"
        raise UserError(f"{key}: {method} with bits {bits}: vLLM reads {read} weights")
    if not awq and q.get("sym") is not True:  # (AutoGPTQConfig.TYPE_MAP: (4, True) and (8, True) only)
        raise UserError(
            f"{key}.sym: {cut(repr(q.get('sym')), 20)}: vLLM 0.32 serves symmetric GPTQ weights only (sym true)"
        )
    # AutoAWQ stores an fp16 scale and a zero point (packed 4-bit) per group: the int4 default's 20
    # bits; AWQ with zero_point false, and GPTQ (symmetric), have the scale alone
    scale = 16.0 if not awq or q.get("zero_point") is False else None
    group = _group(q, key, "q_group_size" if awq and "q_group_size" in q else "group_size")
    _check_whole(q.get("modules_to_not_convert"), f"{key}.modules_to_not_convert", SUBSTRINGS, layers)
    return CheckpointQuant(method, f"int{bits}", "", group, scale)


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


# the activations each weight dtype has a compressed-tensors scheme for in vLLM 0.32
# (CompressedTensorsConfig._get_scheme_from_parts): W8A16 / W8A8 FP8, W8A16 / W8A8 INT8, W4A16 /
# W4A8 INT8 (WNA8Int) / W4A8 FP8 (Hopper), NVFP4A16 / NVFP4 / MXFP4 with FP8 activations (groups of 32)
_CT_SCHEMES = {
    "fp8": ("", "fp8"),
    "int8": ("", "int8", "int4"),
    "int4": ("", "int8", "fp8", "int4"),
    "fp4": ("", "fp4", "fp8"),
}


# the modules a checkpoint may leave unquantised and still be priced as quantised: the LM head,
# embeddings, norms, a MoE router or shared-expert gate, a vision or audio tower (a small share of
# the decoder's weights), matched on a pattern's plain text (``_plain``); and single layers' modules
# by their path, in a few layers
_MINOR = re.compile(
    r"lm_head|embed|norm|vision|visual|audio|projector|multi_modal|mm_|router|gate$",
    re.IGNORECASE,
)
_LAYER = re.compile(r"layers?\.(\d+)\.", re.IGNORECASE)


def _plain(entry: str) -> str:
    """A module name or ``re:`` pattern as plain text: ``re:.*mlp[.]gate$`` -> ``.*mlp.gate``."""
    text = entry.removeprefix("re:")
    for end in ("$", "\\b", ".*"):
        text = text.removesuffix(end)
    return text.replace("[.]", ".").replace("\\", "")


# how a list names modules (``_check_whole``'s ``how``, in its message), where the kinds differ
SUBSTRINGS, WILDCARDS = "substrings of module names", "wildcards"


def _pattern(entry: str, how: str) -> bool:
    """Whether a list entry may match modules other than the one it names exactly: every substring
    entry (AWQ), a ``re:`` pattern (compressed-tensors), a wildcard (ModelOpt's fnmatch)."""
    if how == SUBSTRINGS:
        return True
    return entry.startswith("re:") or (how == WILDCARDS and any(c in entry for c in "*?["))


def _check_whole(entries: object, key: str, how: str, layers: int = 0) -> None:
    """Refuse a list of modules left unquantised that reaches beyond the minor ones, or names
    modules by path in more than an eighth of the layers (at least two): priced as quantised, those
    layers' weights would be counted at a quarter of their bytes (a 16 GB model as 5.7 GB). ``how``
    says how the list names modules: compressed-tensors' ``ignore``, exact names or ``re:``
    patterns; AWQ's ``modules_to_not_convert``, substrings of names (``SUBSTRINGS``); the fp8
    method's ``ignored_layers``, exact names; ModelOpt's ``exclude_modules`` / ``ignore``,
    wildcards (``WILDCARDS``)."""
    if entries is None:
        return
    if not isinstance(entries, list):
        raise UserError(f"{key}: expected a list of module names, got {type(entries).__name__}")
    plain = [(e, _plain(e)) for e in entries if isinstance(e, str)]
    major = [e for e in entries if not isinstance(e, str)]
    # a name matched whole (not a substring or pattern) reaches a decoder layer only by its path:
    # fp8's "gate" or "e_score_correction_bias" (MiniMax-M2) names no layer's linear
    major += [e for e, p in plain if not _MINOR.search(p) and not _LAYER.search(p) and _pattern(e, how)]
    by_layer = {m.group(1) for _, p in plain if not _MINOR.search(p) and (m := _LAYER.search(p))}
    if len(by_layer) > max(2, layers // 8):
        major.append(f"modules of {len(by_layer)} layers by path")
    if major:
        raise UserError(
            f"{key}: {cut(repr(major), 80)} ({how}) leaves decoder layers unquantised; llmsim prices one "
            "precision per model: set model.weight_dtype / act_dtype in a scenario for a partly quantised checkpoint"
        )


def _compressed_tensors(q: dict, key: str, layers: int = 0) -> CheckpointQuant:
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
        size = _group(wargs, f"{gkey}.weights") if strategy in ("group", "tensor_group") else 0
        # a symmetric group scale is 16 bits (fp16 / bf16; NVFP4's and MXFP4's are 8-bit: their defaults)
        scale = 16.0 if weight in ("int4", "int8") and size and wargs.get("symmetric", True) else None
        if weight == "fp4":
            scale = None if size == 16 else 8.0  # NVFP4: an E4M3 scale per 16; MXFP4: an E8M0 per 32
        if act not in _CT_SCHEMES[weight] or ((weight, act) == ("fp4", "fp8") and size != 32):
            raise UserError(
                f"{gkey}: {weight} weights with {act or '16-bit'} activations: vLLM 0.32 has no compressed-tensors "
                f"scheme for the pair (_get_scheme_from_parts: 'No compressed-tensors compatible scheme was found'); "
                f"{weight} weights take {', '.join(a or 'none (weight-only)' for a in _CT_SCHEMES[weight])} activations"
            )
        schemes[name] = (weight, act, size, scale)
    if len(set(schemes.values())) > 1:
        listed = "; ".join(f"{n}: {w} weights, {a or '16-bit'} compute" for n, (w, a, _, _) in schemes.items())
        raise UserError(
            f"{key}.config_groups: the groups quantise layers differently ({listed}); llmsim prices one precision "
            "per model: set model.weight_dtype / act_dtype in a scenario for the layers that dominate"
        )
    _check_whole(q.get("ignore"), f"{key}.ignore", "exact names or re: patterns", layers)
    targets = [t for g in groups.values() for t in (g.get("targets") or ["Linear"])]
    if all(isinstance(t, str) and _MINOR.search(_plain(t)) for t in targets):
        raise UserError(
            f"{key}.config_groups: targets {cut(repr(targets), 60)} reach only modules outside the decoder's "
            "layers (the LM head, embeddings, a router): llmsim prices a checkpoint whose layers are quantised; "
            "set model.weight_dtype / act_dtype in a scenario for this one"
        )
    weight, act, size, scale = next(iter(schemes.values()))
    if act == "int4":  # (vLLM's W4A4 integer scheme: llmsim has no 4-bit integer matrix units)
        raise UserError(
            f"{key}: 4-bit integer activations (W4A4 INT) are not modelled; llmsim computes in fp8, int8, fp4"
        )
    return CheckpointQuant("compressed-tensors", weight, act, size, scale, _ct_kv(q.get("kv_cache_scheme"), key))


def _ct_kv(scheme: object, key: str) -> str:
    """An llm-compressor ``kv_cache_scheme``: vLLM's Attention takes an fp8 cache under
    --kv-cache-dtype auto whenever the config has one (vllm/model_executor/layers/attention/
    attention.py); llmsim prices the static FP8 scheme llm-compressor writes, and refuses another
    rather than price it as FP8."""
    if scheme is None:
        return ""
    ok = isinstance(scheme, dict) and scheme.get("type", "float") == "float" and scheme.get("num_bits") == 8
    if not ok or scheme.get("dynamic") is True:  # type: ignore[union-attr]
        raise UserError(
            f"{key}.kv_cache_scheme: {cut(repr(scheme), 80)}: llmsim prices a static FP8 KV cache (type float, "
            "num_bits 8); set kv_cache.dtype in a scenario for another"
        )
    return "fp8"


# ModelOpt's quant_algo -> (weights, compute, weights per scale, scale bits)
_MODELOPT = {
    "FP8": ("fp8", "fp8", None, None),
    "FP8_PER_CHANNEL_PER_TOKEN": ("fp8", "fp8", None, None),
    "FP8_PB_WO": ("fp8", "fp8", None, None),
    "NVFP4": ("fp4", "fp4", None, None),
    "W4A16_NVFP4": ("fp4", "", None, None),
    "MXFP8": ("fp8", "fp8", 32, 8.0),  # e4m3 weights, an E8M0 scale per 32
}


def _modelopt(q: dict, method: str, key: str, layers: int = 0) -> CheckpointQuant:
    inner = q.get("quantization") if isinstance(q.get("quantization"), dict) else q
    # (ModelOptQuantConfigBase.from_config: a legacy file's exclude_modules, else config.json's
    # ignore; wildcards)
    field = "exclude_modules" if inner is not q else "ignore"
    _check_whole(inner.get(field), f"{key}{'.quantization' if inner is not q else ''}.{field}", WILDCARDS, layers)
    algo = inner.get("quant_algo") or ("MXFP8" if "mxfp8" in method else None)  # (MiniMax's quant_method mxfp8)
    if not isinstance(algo, str) or algo.upper() not in _MODELOPT:
        raise UserError(
            f"{key}.quant_algo {cut(repr(algo), 40)}: llmsim reads {', '.join(_MODELOPT)} (a MIXED_PRECISION "
            "checkpoint: set model.weight_dtype / act_dtype in a scenario)"
        )
    weight, act, size, scale = _MODELOPT[algo.upper()]
    groups = q.get("config_groups")
    # weight-only groups make an NVFP4 checkpoint W4A16 (ModelOptNvFp4Config._from_config)
    weight_only = isinstance(groups, dict) and bool(groups)
    weight_only = weight_only and all(
        isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()
    )
    if algo.upper() == "NVFP4" and weight_only:
        act = ""
    return CheckpointQuant(method, weight, act, size, scale, _modelopt_kv(inner, q, key))


def _modelopt_kv(inner: dict, q: dict, key: str) -> str:
    """The KV cache dtype ``--kv-cache-dtype auto`` takes from a ModelOpt checkpoint: its
    ``kv_cache_quant_algo`` (or ``kv_cache_scheme``) FP8; "" for none."""
    kv = inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
    kv = kv or q.get("kv_cache_quant_algo")
    if kv is None:
        return ""
    if isinstance(kv, dict):  # (vLLM: static FP8 only; anything else falls back to auto, with a warning)
        if kv.get("dynamic") is False and kv.get("type") == "float" and kv.get("num_bits") == 8:
            return "fp8"
        if kv.get("type") == "float" and kv.get("num_bits") == 4:
            raise UserError(f"{key}: kv_cache_scheme: an NVFP4 KV cache is not modelled (llmsim's: bf16, fp16, fp8)")
        return ""
    if isinstance(kv, str) and kv.lower() == "fp8":  # (MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP's keys)
        return "fp8"
    if isinstance(kv, str) and "fp4" in kv.lower():
        raise UserError(f"{key}: kv_cache_quant_algo {cut(repr(kv), 20)}: an NVFP4 KV cache is not modelled")
    return ""


# A hub id's name, where llmsim has no config.json to read: the suffixes quantised checkpoints are
# published under (RedHatAI / neuralmagic: -FP8, -FP8-dynamic, -quantized.w8a8, -quantized.w4a16;
# NVIDIA ModelOpt: -FP8, -FP4, -NVFP4; Qwen: -FP8, -AWQ, -GPTQ-Int4 / -Int8; hugging-quants:
# -AWQ-INT4), read as the format their configs carry. A guess by name: serving the folder reads the
# config itself.
NAME_SUFFIXES: dict[str, CheckpointQuant] = {
    **dict.fromkeys(("fp8", "fp8-dynamic", "fp8-static", "fp8-block"), CheckpointQuant("fp8", "fp8", "fp8")),
    **dict.fromkeys(("fp4", "nvfp4"), CheckpointQuant("nvfp4", "fp4", "fp4")),
    **dict.fromkeys(("awq", "awq-int4", "int4-awq"), CheckpointQuant("awq", "int4")),
    **dict.fromkeys(("gptq-int4", "gptq-4bit", "int4-gptq"), CheckpointQuant("gptq", "int4")),
    **dict.fromkeys(("gptq-int8", "gptq-8bit", "int8-gptq"), CheckpointQuant("gptq", "int8")),
    **dict.fromkeys(("w8a8", "quantized.w8a8"), CheckpointQuant("w8a8", "int8", "int8")),
    **dict.fromkeys(("w4a16", "quantized.w4a16"), CheckpointQuant("w4a16", "int4", "", 128, 16.0)),
    **dict.fromkeys(("w8a16", "quantized.w8a16"), CheckpointQuant("w8a16", "int8", "", 0)),
}


# the formats a scenario names with ``model.checkpoint`` (a catalog model's quantised checkpoint
# without its config.json: what a hub id's suffix says), one per distinct reading of the suffixes
CheckpointFormat = Literal["fp8", "nvfp4", "awq", "gptq-int4", "gptq-int8", "w8a8", "w4a16", "w8a16"]
CHECKPOINT_FORMATS: dict[str, CheckpointQuant] = {key: NAME_SUFFIXES[key] for key in get_args(CheckpointFormat)}


def format_name(q: CheckpointQuant) -> str:
    """The ``model.checkpoint`` value of a format read from a hub id's name."""
    return next(key for key, known in CHECKPOINT_FORMATS.items() if known == q)


def split_quant_suffix(name: str) -> tuple[str, CheckpointQuant | None]:
    """A hub model name without its quantisation suffix, and the format the suffix names (None:
    no suffix llmsim reads): ``Qwen3-8B-FP8`` -> (``Qwen3-8B``, FP8 W8A8)."""
    low = name.lower()
    for suffix in sorted(NAME_SUFFIXES, key=len, reverse=True):
        for sep in ("-", "_", "."):
            if low.endswith(sep + suffix):
                return name[: len(name) - len(suffix) - 1], NAME_SUFFIXES[suffix]
    return name, None
