#!/usr/bin/env python3
"""gptoss_fixtures.py - tiny random gpt-oss checkpoints: transformers' logits, and the weights
written as the GGUF llama.cpp's convert_hf_to_gguf.py would make; and one checkpoint as gpt-oss is
released on Hugging Face (MXFP4 experts in blocks and scales).

transformers' GptOssForCausalLM is the oracle for hmoe's gpt-oss forward pass: q/k/v/o biases,
a sink logit per head joining each softmax, a 8-position sliding window on every other layer
(from layer 0), YaRN, the router's bias and its softmax over the top-k logits, the clamped SwiGLU
experts with biases. The experts' fused gate_up_proj [E][H][2I] (gate and up interleaved) and
down_proj [E][I][H] become llama.cpp's ffn_{gate,up}_exps [E][I][H] and ffn_down_exps [E][H][I]
with their biases. Each model goes to tests/data/gptoss/<name>/ as model.gguf (float32) with
expected.json in the format of tests/data/qwen3moe/ (tests/fixture.h reads both).

    pip install torch transformers==5.24.0 gguf==0.19.0 numpy
    python3 tests/gen/gptoss_fixtures.py [NAME ...]  # rewrites tests/data/gptoss/[NAME]

The committed files were produced with python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0,
gguf 0.19.0, numpy 2.4.6. Fixed seeds, one thread, deterministic algorithms; norms drawn from
[0.5, 1.5), biases and sinks from N(0, 0.5) so that every term shows. The prompts of 23 tokens and
the greedy continuations run past the window and YaRN's original context (16).
"""
import json
import os
import shutil
import sys
import tempfile

import gguf
import numpy as np
import torch
from transformers import GptOssConfig, GptOssForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import run, write_oracle  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gptoss")

MODELS = {
    "a": dict(seed=61, vocab_size=384, hidden_size=64, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
              num_experts_per_tok=2, sliding_window=8),
    "b": dict(seed=62, vocab_size=256, hidden_size=96, intermediate_size=32, num_hidden_layers=3,
              num_attention_heads=6, num_key_value_heads=2, head_dim=24, num_local_experts=6,
              num_experts_per_tok=3, sliding_window=8),
}
# a Hugging Face checkpoint in MXFP4, as released (rows of whole 32-value blocks)
HF_MODELS = {
    "hf": dict(seed=63, vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
               num_experts_per_tok=2, sliding_window=8),
}
ROPE = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
        "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 16}


def write_gguf(path, cfg, sd):
    f = lambda t: t.detach().float().numpy().astype(np.float32)  # noqa: E731
    w = gguf.GGUFWriter(path, "gpt-oss")
    w.add_name("hmoe gpt-oss fixture")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(ROPE["rope_theta"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(ROPE["factor"])
    w.add_rope_scaling_orig_ctx_len(ROPE["original_max_position_embeddings"])
    w.add_expert_count(cfg.num_local_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_feed_forward_length(cfg.intermediate_size)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_sliding_window(cfg.sliding_window)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tensor("token_embd.weight", f(sd["model.embed_tokens.weight"]))
    w.add_tensor("output_norm.weight", f(sd["model.norm.weight"]))
    w.add_tensor("output.weight", f(sd["lm_head.weight"]))
    for i in range(cfg.num_hidden_layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", f(sd[p + "input_layernorm.weight"]))
        w.add_tensor(b + "post_attention_norm.weight", f(sd[p + "post_attention_layernorm.weight"]))
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                       ("o_proj", "attn_output")):
            w.add_tensor(b + gg + ".weight", f(sd[p + f"self_attn.{hf}.weight"]))
            w.add_tensor(b + gg + ".bias", f(sd[p + f"self_attn.{hf}.bias"]))
        w.add_tensor(b + "attn_sinks.weight", f(sd[p + "self_attn.sinks"]))
        w.add_tensor(b + "ffn_gate_inp.weight", f(sd[p + "mlp.router.weight"]))
        w.add_tensor(b + "ffn_gate_inp.bias", f(sd[p + "mlp.router.bias"]))
        gu, gub = f(sd[p + "mlp.experts.gate_up_proj"]), f(sd[p + "mlp.experts.gate_up_proj_bias"])
        w.add_tensor(b + "ffn_gate_exps.weight", np.ascontiguousarray(gu[:, :, 0::2].transpose(0, 2, 1)))
        w.add_tensor(b + "ffn_up_exps.weight", np.ascontiguousarray(gu[:, :, 1::2].transpose(0, 2, 1)))
        w.add_tensor(b + "ffn_gate_exps.bias", np.ascontiguousarray(gub[:, 0::2]))
        w.add_tensor(b + "ffn_up_exps.bias", np.ascontiguousarray(gub[:, 1::2]))
        w.add_tensor(b + "ffn_down_exps.weight",
                     np.ascontiguousarray(f(sd[p + "mlp.experts.down_proj"]).transpose(0, 2, 1)))
        w.add_tensor(b + "ffn_down_exps.bias", f(sd[p + "mlp.experts.down_proj_bias"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build(spec):
    """the seeded random model of a spec: norms from [0.5, 1.5), biases and sinks N(0, 0.5), the
    rest N(0, 0.1)"""
    spec = dict(spec)
    seed = spec.pop("seed")
    torch.manual_seed(seed)
    cfg = GptOssConfig(max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       rope_parameters=dict(ROPE), **spec)
    model = GptOssForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(torch.rand_like(p) + 0.5)
            elif n.endswith("bias") or n.endswith("sinks"):
                p.copy_(torch.randn_like(p) * 0.5)
            else:
                p.copy_(torch.randn_like(p) * 0.1)
    return seed, cfg, model


def ggml_to_hf_mxfp4(q):
    """ggml's MXFP4 blocks ([rows][blocks * 17]: the E8M0 exponent, then 16 bytes holding values j
    and j + 16 in the low and high nibbles of byte j) as the Hugging Face checkpoints store them:
    blocks [rows][blocks][16] (values 2j and 2j + 1 in byte j) and scales [rows][blocks]"""
    rows = q.shape[0]
    b = q.reshape(rows, -1, 17)
    e, qs = b[:, :, 0], b[:, :, 1:]
    vals = np.concatenate([qs & 15, qs >> 4], axis=2)  # [rows][blocks][32], in value order
    return (vals[:, :, 0::2] | (vals[:, :, 1::2] << 4)).astype(np.uint8), e.astype(np.uint8)


def make_hf(name, spec):
    """A Hugging Face checkpoint as gpt-oss is released: experts in MXFP4 blocks and scales (the
    gguf package quantizes them; transformers' own MXFP4 dequantization reads them back, and is
    checked here to equal gguf's), everything else in float32"""
    from safetensors.torch import save_file
    seed, cfg, model = build(spec)
    sd = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
    MX = gguf.GGMLQuantizationType.MXFP4
    want = {}
    for il in range(cfg.num_hidden_layers):
        p = f"model.layers.{il}.mlp.experts."
        for proj in ("gate_up_proj", "down_proj"):
            w = sd.pop(p + proj).numpy()  # [E][in][out]: packed rows are out, columns in
            blocks, scales, deq = [], [], []
            for e in range(w.shape[0]):
                q = gguf.quants.quantize(np.ascontiguousarray(w[e].T), MX)
                bl, sc = ggml_to_hf_mxfp4(q)
                blocks.append(bl), scales.append(sc)
                deq.append(gguf.quants.dequantize(q, MX).T)
            sd[p + proj + "_blocks"] = torch.from_numpy(np.stack(blocks))
            sd[p + proj + "_scales"] = torch.from_numpy(np.stack(scales))
            want[p + proj] = np.stack(deq).astype(np.float32)
    out = os.path.join(ROOT, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    c = cfg.to_dict()
    c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    c["architectures"] = ["GptOssForCausalLM"]
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(c, fh, indent=2, sort_keys=True)
        fh.write("\n")
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    from transformers import Mxfp4Config  # its CPU path: the experts dequantized at load
    back = GptOssForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                             quantization_config=Mxfp4Config(dequantize=True))
    back = back.float().eval()
    bsd = back.state_dict()
    for k, v in want.items():  # transformers' reading of the blocks is gguf's
        got = bsd[k].float().numpy()
        assert np.array_equal(got, v), f"{k}: transformers' MXFP4 differs from gguf's"
    margins = write_oracle(out, back, cfg.vocab_size, seed)
    print(name, "margins", margins)


def make(name, spec):
    seed, cfg, model = build(spec)
    out = os.path.join(ROOT, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with tempfile.TemporaryDirectory() as tmp:  # transformers reads its own save back, as usual
        model.save_pretrained(tmp, safe_serialization=True)
        back = GptOssForCausalLM.from_pretrained(tmp, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    write_gguf(os.path.join(out, "model.gguf"), back.config, back.state_dict())
    margins = write_oracle(out, back, cfg.vocab_size, seed, {"model": "model.gguf"})
    print(name, "margins", margins)


if __name__ == "__main__":  # names on the command line: only those
    names = sys.argv[1:]
    pick = lambda d: {k: v for k, v in d.items() if not names or k in names}  # noqa: E731
    sys.exit(run(ROOT, pick(MODELS), make) or run(ROOT, pick(HF_MODELS), make_hf))
