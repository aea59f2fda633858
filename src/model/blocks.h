/* blocks.h - building blocks shared by the architectures' layer builders: each appends the nodes
 * of one sub-block (graph.h) for layer il. */
#ifndef HM_MODEL_BLOCKS_H
#define HM_MODEL_BLOCKS_H

#include "model/graph.h"
#include "model/model.h"

/* xn = rmsnorm(x) * attn_norm; grouped-query attention with optional q/k/v biases, per-head q/k
 * norms and RoPE; tmp = o_proj(attention) */
hm_status hm_build_attn_gqa(hm_graph *g, const hm_layer *L, int il);

/* xn = rmsnorm(x) * attn_norm; multi-head latent attention (deepseek2) over the compressed
 * cache; tmp = o_proj(attention) */
hm_status hm_build_attn_mla(hm_graph *g, const hm_layer *L, int il);

/* x += tmp; xn = rmsnorm(x) * ffn_norm: the residual add of the attention and the FFN's norm */
hm_status hm_build_ffn_norm(hm_graph *g, const hm_layer *L, int il);

/* tmp = the routed experts of xn: router logits, top-k, the expert engine's weighted sum */
hm_status hm_build_moe_ffn(hm_graph *g, const hm_layer *L, int il);

/* tmp = down(act(gate(xn)) * up(xn)) */
hm_status hm_build_dense_mlp(hm_graph *g, const hm_layer *L, int il);

/* tmp += sigmoid(xn . sh_inp) * shared(xn), shared = down(act(gate(xn)) * up(xn)) of the layer's
 * shared expert (sh_inp NULL: no gate); after the routed experts' sum is in tmp */
hm_status hm_build_shared_expert(hm_graph *g, const hm_layer *L, int il);

/* tmp = the layer's FFN: the dense MLP, or the routed experts and the shared expert (if any) */
hm_status hm_build_ffn(hm_graph *g, const hm_layer *L, int il);

/* Every layer of a pre-norm decoder: attention (grouped-query, or MLA), the FFN's norm, the FFN
 * (hm_build_ffn), the residual add. Each architecture's layers are this, its differences being
 * in the layer's tensors (biases, norms, sinks, shared experts) and the model's hparams. */
hm_status hm_build_layers(const hm_model *m, const hm_layer *layers, bool mla, hm_graph *g);

/* x += tmp: the FFN's residual add, closing layer il */
hm_status hm_build_residual(hm_graph *g, int il);

#endif
