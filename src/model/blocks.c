/* blocks.c - the shared sub-blocks of blocks.h, and the graph's storage. */
#include "model/blocks.h"

#include <stdlib.h>

hm_status hm_graph_add(hm_graph *g, hm_node node) {
    if (g->n == g->cap) {
        const int cap = g->cap ? 2 * g->cap : 64;
        hm_node *p = realloc(g->nodes, sizeof *p * (size_t)cap);
        if (!p) return hm_errorf(HM_ERR_NO_MEMORY, "graph: out of memory for %d nodes", cap);
        g->nodes = p, g->cap = cap;
    }
    g->nodes[g->n++] = node;
    return HM_OK;
}

void hm_graph_free(hm_graph *g) {
    free(g->nodes);
    g->nodes = NULL, g->n = g->cap = 0;
}

const char *hm_op_name(hm_op op) {
    static const char *const names[HM_OP_COUNT] = {
        "norm",        "add_norm", "add", "matmul",    "qk_rope_kv", "attn",
        "router_topk", "glu",      "moe", "gated_add", "mla"};
    return op >= 0 && op < HM_OP_COUNT ? names[op] : "?";
}

#define ADD(...)                                                                                   \
    do {                                                                                           \
        hm_status st_ = hm_graph_add(g, (hm_node){__VA_ARGS__});                                   \
        if (st_) return st_;                                                                       \
    } while (0)

hm_status hm_build_attn_gqa(hm_graph *g, const hm_layer *L, int il) {
    ADD(.op = HM_OP_NORM, .dst = HM_SLOT_XN, .src0 = HM_SLOT_X, .nw = L->attn_norm, .il = il,
        .prof = HM_PROF_NORM);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_Q, .src0 = HM_SLOT_XN, .w = &L->wq, .bias = L->bq,
        .il = il, .prof = HM_PROF_ATTN_PROJ);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_K, .src0 = HM_SLOT_XN, .w = &L->wk, .bias = L->bk,
        .il = il, .prof = HM_PROF_ATTN_PROJ);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_V, .src0 = HM_SLOT_XN, .w = &L->wv, .bias = L->bv,
        .il = il, .prof = HM_PROF_ATTN_PROJ);
    ADD(.op = HM_OP_QK_ROPE_KV, .dst = HM_SLOT_V, .src0 = HM_SLOT_Q, .src1 = HM_SLOT_K,
        .nw = L->q_norm, .nw2 = L->k_norm, .il = il, .prof = HM_PROF_ATTN);
    ADD(.op = HM_OP_ATTN, .dst = HM_SLOT_ATT, .src0 = HM_SLOT_Q, .nw = L->sinks, .il = il,
        .prof = HM_PROF_ATTN);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_TMP, .src0 = HM_SLOT_ATT, .w = &L->wo, .bias = L->bo,
        .il = il, .prof = HM_PROF_ATTN_PROJ);
    return HM_OK;
}

hm_status hm_build_attn_mla(hm_graph *g, const hm_layer *L, int il) {
    ADD(.op = HM_OP_NORM, .dst = HM_SLOT_XN, .src0 = HM_SLOT_X, .nw = L->attn_norm, .il = il,
        .prof = HM_PROF_NORM);
    ADD(.op = HM_OP_MLA, .dst = HM_SLOT_ATT, .src0 = HM_SLOT_XN, .il = il, .prof = HM_PROF_ATTN);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_TMP, .src0 = HM_SLOT_ATT, .w = &L->wo, .il = il,
        .prof = HM_PROF_ATTN_PROJ);
    return HM_OK;
}

hm_status hm_build_ffn_norm(hm_graph *g, const hm_layer *L, int il) {
    ADD(.op = HM_OP_ADD_NORM, .dst = HM_SLOT_XN, .src0 = HM_SLOT_X, .src1 = HM_SLOT_TMP,
        .nw = L->ffn_norm, .il = il, .prof = HM_PROF_NORM);
    return HM_OK;
}

hm_status hm_build_moe_ffn(hm_graph *g, const hm_layer *L, int il) {
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_RL, .src0 = HM_SLOT_XN, .w = &L->router,
        .bias = L->router_b, .il = il, .prof = HM_PROF_ROUTER);
    ADD(.op = HM_OP_ROUTER_TOPK, .src0 = HM_SLOT_RL, .nw = L->exp_bias, .il = il,
        .prof = HM_PROF_ROUTER);
    ADD(.op = HM_OP_MOE, .dst = HM_SLOT_TMP, .src0 = HM_SLOT_XN, .il = il, .prof = HM_PROF_MOE);
    return HM_OK;
}

hm_status hm_build_dense_mlp(hm_graph *g, const hm_layer *L, int il) {
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_G, .src0 = HM_SLOT_XN, .w = &L->ffn_gate, .il = il,
        .prof = HM_PROF_DENSE);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_U, .src0 = HM_SLOT_XN, .w = &L->ffn_up, .il = il,
        .prof = HM_PROF_DENSE);
    ADD(.op = HM_OP_GLU, .dst = HM_SLOT_G, .src0 = HM_SLOT_U, .w = &L->ffn_gate, .il = il,
        .prof = HM_PROF_DENSE);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_TMP, .src0 = HM_SLOT_G, .w = &L->ffn_down, .il = il,
        .prof = HM_PROF_DENSE);
    return HM_OK;
}

hm_status hm_build_shared_expert(hm_graph *g, const hm_layer *L, int il) {
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_G, .src0 = HM_SLOT_XN, .w = &L->sh_gate, .il = il,
        .prof = HM_PROF_DENSE);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_U, .src0 = HM_SLOT_XN, .w = &L->sh_up, .il = il,
        .prof = HM_PROF_DENSE);
    ADD(.op = HM_OP_GLU, .dst = HM_SLOT_G, .src0 = HM_SLOT_U, .w = &L->sh_gate, .il = il,
        .prof = HM_PROF_DENSE);
    ADD(.op = HM_OP_MATMUL, .dst = HM_SLOT_SH, .src0 = HM_SLOT_G, .w = &L->sh_down, .il = il,
        .prof = HM_PROF_DENSE);
    ADD(.op = HM_OP_GATED_ADD, .dst = HM_SLOT_TMP, .src0 = HM_SLOT_SH, .src1 = HM_SLOT_XN,
        .nw = L->sh_inp, .il = il, .prof = HM_PROF_DENSE);
    return HM_OK;
}

hm_status hm_build_ffn(hm_graph *g, const hm_layer *L, int il) {
    if (!L->moe) return hm_build_dense_mlp(g, L, il);
    hm_status st = hm_build_moe_ffn(g, L, il);
    if (!st && L->sh_gate.rows) st = hm_build_shared_expert(g, L, il);
    return st;
}

hm_status hm_build_layers(const hm_model *m, const hm_layer *layers, bool mla, hm_graph *g) {
    hm_status st;
    for (uint32_t il = 0; il < m->hp.n_layers; il++) {
        const hm_layer *L = &layers[il];
        const int i = (int)il;
        if ((st = mla ? hm_build_attn_mla(g, L, i) : hm_build_attn_gqa(g, L, i)) ||
            (st = hm_build_ffn_norm(g, L, i)) || (st = hm_build_ffn(g, L, i)) ||
            (st = hm_build_residual(g, i)))
            return st;
    }
    return HM_OK;
}

hm_status hm_build_residual(hm_graph *g, int il) {
    ADD(.op = HM_OP_ADD, .dst = HM_SLOT_X, .src0 = HM_SLOT_TMP, .il = il, .prof = HM_PROF_NORM);
    return HM_OK;
}
