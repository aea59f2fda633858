/* graph.h - the operations a layer builder emits, and the forward graph they make.
 *
 * An architecture describes its layers once, as a list of nodes over a handful of named
 * activation slots (the batch's residual stream x, its normed copy xn, q/k/v, ...). A backend
 * runs the nodes; where a node runs (CPU, GPU, or split as the hybrid executor splits the MoE
 * node into a host submit and wait around the GPU's own experts) is the plan's business, not
 * the builder's. Backends may fuse neighbouring nodes (the CPU fuses a residual add with the next
 * norm, and the q/k/v projections with the per-head norms, rotation and cache store) but must
 * give the results the nodes define. docs/architecture.md gives the reasoning. */
#ifndef HM_MODEL_GRAPH_H
#define HM_MODEL_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "cpu/matvec.h"

/* Activation slots of a batch of n tokens; rows are tokens. Each backend keeps its own storage
 * for them. */
typedef enum hm_slot {
    HM_SLOT_NONE = 0,
    HM_SLOT_X,   /* [n][hidden] residual stream */
    HM_SLOT_XN,  /* [n][hidden] normed input of the current sub-block */
    HM_SLOT_Q,   /* [n][n_heads * head_dim] */
    HM_SLOT_K,   /* [n][n_kv_heads * head_dim] */
    HM_SLOT_V,   /* [n][n_kv_heads * head_dim] */
    HM_SLOT_ATT, /* [n][n_heads * head_dim] attention output */
    HM_SLOT_TMP, /* [n][hidden] a sub-block's output, before the residual add */
    HM_SLOT_RL,  /* [n][n_experts] router logits */
    HM_SLOT_G,   /* [n][ffn] gate (then act(gate) * up) */
    HM_SLOT_U,   /* [n][ffn] up */
    HM_SLOT_SH,  /* [n][hidden] the shared expert's output, before its gate */
    HM_SLOT_COUNT
} hm_slot;

typedef enum hm_op {
    HM_OP_NORM,        /* dst = rmsnorm(src0) * w */
    HM_OP_ADD_NORM,    /* src0 += src1; dst = rmsnorm(src0) * w (a residual add, then a norm) */
    HM_OP_ADD,         /* dst += src0 */
    HM_OP_MATMUL,      /* dst = W src0 (any weight type) */
    HM_OP_QK_ROPE_KV,  /* per-head rmsnorm of src0 (q) and src1 (k) by w and w2 when given, RoPE
                          of both at the tokens' positions, then k and v (dst) into layer il's
                          cache */
    HM_OP_ATTN,        /* dst = softmax(q k^T * scale) v over layer il's cache, causal; over the
                          last sliding_window positions on the model's sliding layers; w: the
                          heads' sink logits, joining each softmax's denominator (or NULL) */
    HM_OP_ROUTER_TOPK, /* the router's top-k experts and weights of src0 (router logits): the
                          model's gating (softmax, or sigmoid with the correction bias w and
                          group-limited choice, times routed_scaling) */
    HM_OP_GLU,         /* dst = act(dst) * src0 */
    HM_OP_MOE,         /* dst = sum over the top-k of w_e * expert_e(src0) (layer il's experts) */
    HM_OP_GATED_ADD,   /* dst += sigmoid(src1 . w) * src0 per token (w NULL: dst += src0): the
                          shared expert's output with its gate (qwen2moe) */
    HM_OP_MLA,         /* dst [n][n_heads * v_head] = multi-head latent attention of src0 (xn)
                          over layer il's compressed cache (deepseek2): q (and its low rank
                          path), the latent c and k_pe into the cache, scores of the absorbed
                          q . c + q_pe . k_pe, the heads' values up-projected from the latent */
    HM_OP_COUNT
} hm_op;

typedef struct hm_node {
    hm_op op;
    hm_slot dst, src0, src1;
    const hm_matrix *w;    /* MATMUL; GLU: the gate matrix, whose rows are the width */
    const float *bias;     /* MATMUL: [w->rows] added to every row of dst, or NULL */
    const float *nw, *nw2; /* NORM, ADD_NORM: w; QK_ROPE_KV: q and k norms (or NULL); GATED_ADD:
                              the gate's [hidden] weights (or NULL) */
    int il;                /* the layer the node belongs to */
    int prof;              /* the part of the forward pass it is timed under (HM_PROF_*) */
} hm_node;

/* The forward pass over the layers (embedding and output head are the executor's). */
typedef struct hm_graph {
    hm_node *nodes;
    int n, cap;
} hm_graph;

/* Appends a node; HM_ERR_NO_MEMORY when the graph cannot grow. */
hm_status hm_graph_add(hm_graph *g, hm_node node);
void hm_graph_free(hm_graph *g);

const char *hm_op_name(hm_op op);

#endif
