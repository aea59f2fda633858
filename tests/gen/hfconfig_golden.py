#!/usr/bin/env python3
"""Oracle for src/format/hfconfig.c: loads every tests/data/model_configs/*/config.json with the
`transformers` configuration classes (no torch needed) and writes what they compute, mapped onto
the fields of hm_hparams, to tests/data/model_configs/golden.json.

    pip install transformers        # 5.x; the 4.x spellings in the fixtures are what it reads
    python3 tests/gen/hfconfig_golden.py             # regenerate variants + golden.json
    python3 tests/gen/hfconfig_golden.py --check     # fail if the committed files are stale

transformers does the normalisation: class defaults for absent keys, attribute aliases
(num_experts / num_local_experts / n_routed_experts), rope_theta + rope_scaling (4.x) folded into
rope_parameters (5.x), head_dim / num_key_value_heads defaults, layer_types, mlp_only_layers. Facts
that live in the modeling code rather than the config (qwen3 always has q/k norm, gpt-oss has
attention sinks, which layers are dense) are written here from that code, cited next to each.

It also writes the "-tf5" fixtures: each base config loaded by transformers 5 and saved back the
way save_pretrained() does (rope_parameters instead of rope_theta/rope_scaling, num_local_experts
for qwen3_moe, head_dim = qk_rope_head_dim for deepseek, layer_types for qwen2_moe, ...), plus a
Mixtral config spelled with `num_experts`.
"""
import argparse
import copy
import json
import math
import os
import sys

import transformers
from transformers import CONFIG_MAPPING

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "model_configs")

# Base fixtures that get a transformers-5 re-save.
TF5_VARIANTS = [
    "Qwen3-30B-A3B",
    "Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4",
    "Mixtral-8x7B-v0.1",
    "DeepSeek-V2-Lite",
    "DeepSeek-V3",
    "gpt-oss-20b",
    "GLM-4.5-Air",
]

ARCH = {  # hm_arch_name()
    "qwen3_moe": "qwen3moe",
    "qwen2_moe": "qwen2moe",
    "mixtral": "mixtral",
    "deepseek_v2": "deepseek2",
    "deepseek_v3": "deepseek2",
    "kimi_k2": "deepseek2",
    "gpt_oss": "gptoss",
    "glm4_moe": "glm4moe",
}


def load_config(raw):
    d = copy.deepcopy(raw)
    d.pop("auto_map", None)  # remote-code pointers; the in-library classes are the oracle
    cls = CONFIG_MAPPING[d["model_type"]]
    return cls(**{k: v for k, v in d.items() if k != "model_type"})


def expected(cfg, raw):
    """hm_hparams values implied by the transformers config object `cfg`."""
    mt = cfg.model_type
    nl = cfg.num_hidden_layers
    mla = mt in ("deepseek_v2", "deepseek_v3")
    hp = {"arch": ARCH[mt], "model_type": raw["model_type"]}

    hp["vocab_size"] = cfg.vocab_size
    hp["hidden"] = cfg.hidden_size
    hp["n_layers"] = nl
    # DeepseekV3Config / Glm4MoeConfig alias num_nextn_predict_layers as num_mtp_layers.
    hp["n_nextn_layers"] = getattr(cfg, "num_nextn_predict_layers", 0) or 0
    hp["max_ctx"] = cfg.max_position_embeddings
    hp["norm_eps"] = cfg.rms_norm_eps
    hp["tie_embeddings"] = bool(cfg.tie_word_embeddings)

    hp["n_heads"] = cfg.num_attention_heads
    hp["n_kv_heads"] = cfg.num_key_value_heads
    if mla:
        # Deepseek*Config.__post_init__: qk_head_dim = nope + rope, head_dim = qk_rope_head_dim.
        hp["head_dim"] = cfg.qk_head_dim
        hp["v_head_dim"] = cfg.v_head_dim
    else:
        # modeling_*.py: getattr(config, "head_dim", None) or hidden_size // num_attention_heads
        hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        hp["head_dim"] = hd
        hp["v_head_dim"] = hd
    # Qwen3MoeAttention always has q_norm/k_norm; Glm4MoeAttention when use_qk_norm.
    hp["qk_norm"] = mt == "qwen3_moe" or (mt == "glm4_moe" and bool(cfg.use_qk_norm))
    if mt == "qwen2_moe":
        hp["attn_bias"] = bool(getattr(cfg, "qkv_bias", True))  # q/k/v Linear(bias=config.qkv_bias)
    elif mt == "mixtral":
        hp["attn_bias"] = False
    else:
        hp["attn_bias"] = bool(getattr(cfg, "attention_bias", False))
    # o_proj bias: gpt-oss and deepseek use bias=config.attention_bias, the others bias=False.
    hp["attn_out_bias"] = bool(cfg.attention_bias) if mt in ("gpt_oss", "deepseek_v2", "deepseek_v3") else False
    hp["attn_sinks"] = mt == "gpt_oss"  # GptOssAttention.sinks

    layer_types = getattr(cfg, "layer_types", None)
    sw = getattr(cfg, "sliding_window", None) or 0
    if mt == "gpt_oss" or (mt == "qwen2_moe" and layer_types):
        sliding = [1 if t == "sliding_attention" else 0 for t in layer_types]
    elif mt == "mixtral":
        sliding = [1 if sw else 0] * nl  # one mask for every layer when sliding_window is set
    else:
        sliding = [0] * nl
    if not sw:
        sliding = [0] * nl  # transformers uses no window when sliding_window is None/0
    if not any(sliding):
        sw = 0
    hp["sliding_window"] = sw
    hp["layer_sliding"] = sliding + [0] * hp["n_nextn_layers"]

    if mla:
        hp["q_lora_rank"] = cfg.q_lora_rank or 0
        hp["kv_lora_rank"] = cfg.kv_lora_rank
        hp["qk_rope_head_dim"] = cfg.qk_rope_head_dim
        hp["qk_nope_head_dim"] = cfg.qk_nope_head_dim
    else:
        hp["q_lora_rank"] = hp["kv_lora_rank"] = hp["qk_rope_head_dim"] = hp["qk_nope_head_dim"] = 0

    # RoPE: transformers 5 standardises everything into rope_parameters.
    rp = cfg.rope_parameters
    rtype = rp.get("rope_type", rp.get("type", "default"))
    hp["rope_theta"] = float(rp["rope_theta"])
    partial = float(rp.get("partial_rotary_factor", 1.0))
    if mla:
        hp["partial_rotary"] = 1.0
        hp["rope_dim"] = cfg.qk_rope_head_dim
    else:
        hp["partial_rotary"] = partial
        hp["rope_dim"] = int(hp["head_dim"] * partial)  # _compute_*_parameters: int(head_dim * prf)
    hp["rope_type"] = {"default": "none", "linear": "linear", "yarn": "yarn"}[rtype]
    if rtype == "default":
        hp.update(rope_factor=1.0, rope_orig_ctx=0, yarn_beta_fast=0.0, yarn_beta_slow=0.0,
                  yarn_mscale=0.0, yarn_mscale_all_dim=0.0, yarn_attn_factor=0.0, yarn_truncate=True)
    elif rtype == "linear":
        hp.update(rope_factor=float(rp["factor"]), rope_orig_ctx=0, yarn_beta_fast=0.0,
                  yarn_beta_slow=0.0, yarn_mscale=0.0, yarn_mscale_all_dim=0.0,
                  yarn_attn_factor=0.0, yarn_truncate=True)
    else:
        # _compute_yarn_parameters: factor None -> max_pos / orig; beta_fast or 32, beta_slow or 1;
        # truncate defaults to True. standardize_rope_params: orig defaults to max_pos.
        orig = rp["original_max_position_embeddings"]
        factor = rp.get("factor")
        if factor is None:
            factor = cfg.max_position_embeddings / orig
        hp.update(
            rope_factor=float(factor),
            rope_orig_ctx=int(orig),
            yarn_beta_fast=float(rp.get("beta_fast") or 32),
            yarn_beta_slow=float(rp.get("beta_slow") or 1),
            yarn_mscale=float(rp.get("mscale") or 0.0),
            yarn_mscale_all_dim=float(rp.get("mscale_all_dim") or 0.0),
            yarn_attn_factor=float(rp.get("attention_factor") or 0.0),
            yarn_truncate=bool(rp.get("truncate", True)),
        )

    # Feed-forward.
    hp["ffn_inter"] = cfg.intermediate_size
    # attribute_map resolves num_experts / num_local_experts / n_routed_experts for each class.
    n_exp = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None) or \
        getattr(cfg, "n_routed_experts", None) or 0
    hp["n_experts"] = n_exp
    hp["n_experts_used"] = cfg.num_experts_per_tok if n_exp else 0
    if mt in ("mixtral", "gpt_oss"):
        hp["moe_inter"] = cfg.intermediate_size  # the experts use intermediate_size
    else:
        hp["moe_inter"] = cfg.moe_intermediate_size
    if mt == "qwen2_moe":
        # Qwen2MoeSparseMoeBlock: shared_expert (shared_expert_intermediate_size) + shared_expert_gate
        hp["n_shared_experts"] = 1 if cfg.shared_expert_intermediate_size else 0
        hp["shared_inter"] = cfg.shared_expert_intermediate_size
        hp["shared_gate"] = hp["n_shared_experts"] == 1
    elif mt in ("deepseek_v2", "deepseek_v3", "glm4_moe"):
        # *MoE.shared_experts = MLP(intermediate_size=moe_intermediate_size * n_shared_experts)
        ns = cfg.n_shared_experts or 0
        hp["n_shared_experts"] = ns
        hp["shared_inter"] = ns * cfg.moe_intermediate_size
        hp["shared_gate"] = False
    else:
        hp["n_shared_experts"] = 0
        hp["shared_inter"] = 0
        hp["shared_gate"] = False

    # Which layers are dense: the decoder-layer constructors in modeling_*.py.
    if mt in ("qwen2_moe", "qwen3_moe"):
        # if (layer_idx not in config.mlp_only_layers) and
        #    (config.num_experts > 0 and (layer_idx + 1) % config.decoder_sparse_step == 0): MoE
        step = cfg.decoder_sparse_step
        dense = [0 if (i not in cfg.mlp_only_layers and n_exp > 0 and (i + 1) % step == 0) else 1
                 for i in range(nl)]
        hp["first_k_dense"] = 0
        hp["decoder_sparse_step"] = step
    elif mt in ("deepseek_v2", "deepseek_v3", "glm4_moe"):
        # layer_idx >= config.first_k_dense_replace -> MoE. (DeepSeek's own modeling code also
        # requires layer_idx % moe_layer_freq == 0; every released config has moe_layer_freq 1.)
        k = cfg.first_k_dense_replace or 0
        freq = raw.get("moe_layer_freq", 1) or 1
        dense = [0 if (i >= k and i % freq == 0) else 1 for i in range(nl)]
        hp["first_k_dense"] = k
        hp["decoder_sparse_step"] = 1
    else:
        dense = [0] * nl
        hp["first_k_dense"] = 0
        hp["decoder_sparse_step"] = 1
    # MTP layers after the trunk follow the same rule (layer index >= first_k_dense -> MoE).
    hp["layer_dense"] = dense + [0 if i >= hp["first_k_dense"] else 1
                                 for i in range(nl, nl + hp["n_nextn_layers"])]

    # Routing.
    if mt in ("mixtral", "gpt_oss"):
        hp["norm_topk_prob"] = True  # softmax renormalised over the top-k (mixtral) / over k logits
    else:
        hp["norm_topk_prob"] = bool(cfg.norm_topk_prob)
    if mt == "gpt_oss":
        hp["gating"] = "softmax_topk"  # GptOssTopKRouter: topk on logits, softmax over the k
    elif mt in ("deepseek_v3", "glm4_moe"):
        hp["gating"] = "sigmoid"  # *TopkRouter: router_logits.sigmoid() + e_score_correction_bias
    elif mt == "deepseek_v2":
        hp["gating"] = "sigmoid" if getattr(cfg, "scoring_func", "softmax") == "sigmoid" else "softmax"
    else:
        hp["gating"] = "softmax"
    hp["routed_scaling"] = float(getattr(cfg, "routed_scaling_factor", 1.0) or 1.0)
    method = getattr(cfg, "topk_method", None)
    grouped = mt in ("deepseek_v3", "glm4_moe") or method in ("group_limited_greedy", "noaux_tc")
    ng = getattr(cfg, "n_group", None) or 0
    if grouped and ng > 1:
        hp["n_group"], hp["topk_group"] = ng, cfg.topk_group
    else:
        hp["n_group"], hp["topk_group"] = 0, 0
    hp["expert_bias"] = mt == "gpt_oss"  # GptOssExperts gate_up_proj_bias / down_proj_bias
    hp["router_bias"] = mt == "gpt_oss"  # GptOssTopKRouter.bias
    hp["score_correction_bias"] = mt in ("deepseek_v3", "glm4_moe") or method == "noaux_tc"
    if mt == "gpt_oss":
        hp["act"] = "swiglu_oai"
        hp["swiglu_alpha"] = float(cfg.swiglu_alpha)
        hp["swiglu_limit"] = float(cfg.swiglu_limit)
    else:
        hp["act"] = "silu"
        hp["swiglu_alpha"] = 0.0
        hp["swiglu_limit"] = 0.0
    return hp


def tf5_resave(raw):
    cfg = load_config(raw)
    d = json.loads(cfg.to_json_string(use_diff=True))  # what save_pretrained() writes
    d.pop("transformers_version", None)  # keep the file stable across transformers releases
    d["transformers_version"] = "5.x (tests/gen/hfconfig_golden.py)"
    return d


def dump(obj):
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    outputs = {}

    for name in TF5_VARIANTS:
        raw = json.load(open(os.path.join(DATA, name, "config.json")))
        outputs[os.path.join(name + "-tf5", "config.json")] = dump(tf5_resave(raw))
    mix = json.load(open(os.path.join(DATA, "Mixtral-8x7B-v0.1", "config.json")))
    mix["num_experts"] = mix.pop("num_local_experts")  # MixtralConfig.attribute_map alias
    outputs[os.path.join("Mixtral-8x7B-v0.1-num_experts", "config.json")] = dump(mix)

    names = sorted(set(
        [d for d in os.listdir(DATA) if os.path.isfile(os.path.join(DATA, d, "config.json"))] +
        [os.path.dirname(p) for p in outputs]))
    golden = {"generator": "tests/gen/hfconfig_golden.py",
              "transformers_major": int(transformers.__version__.split(".")[0]),
              "models": []}
    for name in names:
        rel = os.path.join(name, "config.json")
        raw = json.loads(outputs[rel]) if rel in outputs else json.load(open(os.path.join(DATA, rel)))
        golden["models"].append({"dir": name, "hparams": expected(load_config(raw), raw)})
    outputs["golden.json"] = dump(golden)

    stale = []
    for rel, text in outputs.items():
        path = os.path.join(DATA, rel)
        if args.check:
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(rel)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
    if stale:
        print("stale: " + ", ".join(stale), file=sys.stderr)
        return 1
    print(("checked " if args.check else "wrote ") + ", ".join(sorted(outputs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
