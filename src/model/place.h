/* place.h - where each routed expert of a hybrid context lives: per layer, the experts kept on
 * the GPU (the rest run on the CPU's expert engine). CPU-only and all-GPU are the two ends of
 * the same plan: no expert on the GPU, or all of them.
 *
 * The count per layer comes from --gpu-experts N, or from a byte budget for the experts
 * (--gpu-mem less what the rest of the model, the KV cache and scratch take); a strategy says
 * which experts and, under a budget, how the count is spread over the layers:
 *   uniform    the same count in every layer (the remainder one more in the first layers),
 *              spread evenly over the expert indices;
 *   front      whole layers from the first (front-loading), the last one partly;
 *   random     the same counts as uniform, experts drawn with the seed;
 *   frequency  the most activated experts (counts from `hmoe profile`): per layer with
 *              --gpu-experts, else ranked over all layers, so busy layers get more.
 * Rules ("REGEX=cuda" / "REGEX=cpu", as llama.cpp's -ot and KT's rule files) then move whole
 * layers: a rule whose regular expression is found in one of a layer's expert tensor names
 * (blk.L.ffn_{gate,up,down}_exps.weight) puts all of that layer's experts there; later rules
 * win. */
#ifndef HM_MODEL_PLACE_H
#define HM_MODEL_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct hm_model hm_model;

/* hm_place_strategy is public (hmoe.h) */
const char *hm_place_strategy_name(hm_place_strategy s);
/* -1 when unknown */
int hm_place_strategy_from_name(const char *name);

typedef struct hm_place_params {
    int gpu_experts;     /* routed experts per layer on the GPU; < 0: from gpu_budget */
    uint64_t gpu_budget; /* bytes the experts may take on the GPU (gpu_experts < 0) */
    hm_place_strategy strategy;
    uint64_t seed;            /* HM_PLACE_RANDOM */
    const uint64_t *counts;   /* HM_PLACE_FREQUENCY: [n_layers][n_experts] activations */
    const char *const *rules; /* "REGEX=cuda" or "REGEX=cpu" */
    int n_rules;
} hm_place_params;

typedef struct hm_place_plan {
    int n_layers, n_experts;
    uint8_t *gpu;       /* [n_layers][n_experts]: 1 = on the GPU (dense layers: all 0) */
    int *n_gpu_layer;   /* [n_layers] experts on the GPU per layer */
    uint8_t *moe;       /* [n_layers] 1 = the layer has routed experts */
    int n_gpu;          /* experts on the GPU in all */
    uint64_t gpu_bytes; /* their weights */
    uint64_t all_bytes; /* every routed expert's weights */
} hm_place_plan;

/* Bytes of one routed expert of layer il (gate + up + down); 0 for a dense layer. */
uint64_t hm_place_expert_bytes(const hm_model *m, int il);

/* The plan for m. HM_ERR_INVALID_ARG for a bad rule (its text and why), a frequency strategy
 * without counts, or a rule that matches no expert tensor. */
hm_status hm_place_make(const hm_model *m, const hm_place_params *p, hm_place_plan *out);
void hm_place_free(hm_place_plan *plan);

/* Expert deferral (--defer K): of each of n tokens' k (expert, weight) pairs, those of CPU
 * experts (gpu NULL: every expert; else gpu[id] == 0) split into now and later: the K of them
 * with the lowest weights (ties: the later pair) go to later, the rest to now. now and later are
 * ids' copies ([n][k]) with the other pairs' ids set to -1 (the expert engine skips them), GPU
 * experts' pairs in neither. Returns the pairs deferred. */
int hm_defer_split(const int32_t *ids, const float *w, int n, int k, const uint8_t *gpu, int K,
                   int32_t *now, int32_t *later);
/* One line: "24 of 48 experts per layer on the GPU (...)" or a per-layer list when they differ. */
/* Layerwise prefill's threshold: the tokens of a batch from which streaming a layer's CPU experts
 * to the GPU (copy_s seconds, the GPU computing them meanwhile) takes less time than the CPU
 * computing them (cpu_tok_s tokens per second through one layer's CPU experts): copy_s *
 * cpu_tok_s rounded up, at least min_tokens, at most INT_MAX (a rate that is not positive and
 * finite: INT_MAX, never). */
int hm_place_stream_threshold(double copy_s, double cpu_tok_s, int min_tokens);

/* Layerwise prefill's split: the fraction of a layer's CPU experts a batch of n tokens streams to
 * the GPU, the CPU computing the others meanwhile. Per layer the copy stream works all the time
 * (the copies run a layer ahead) but the CPU only after the GPU's own part of the layer (its
 * attention, router and hand-off: gpu_s_tok seconds per token, 0 where unknown), so both sides
 * take as long where f copy_s = G + (1 - f) P, G = n gpu_s_tok and P = n / cpu_tok_s the CPU's
 * time for all of them: f = (P + G) / (copy_s + P). 1 (all) above 0.9, where the CPU's share no
 * longer pays for its hand-off; 0 (none) below 1/5. 0 for rates that are not positive and finite
 * (a gpu_s_tok that is not counts as 0). On the H100 machine the copies slow the CPU's share to
 * half its lone rate (both read the same memory: bench/RESULTS.md, 2026-12-06), which the rates
 * learned in-run (hm_place_rate_update) carry. */
double hm_place_stream_split(double copy_s, double cpu_tok_s, double gpu_s_tok, int n);

/* The fraction a layerwise batch of n tokens streams: `force` where it is in (0, 1]; else
 * hm_place_stream_split's, all where that is none (the batch passed a threshold given below the
 * split's). Until a split batch has been seen (`seen`), all becomes two thirds: the context's
 * own timing has read the CPU slower than it runs in a batch (12-14 against 8-10 ms on the H100
 * machine), so that batch measures both sides and the next ones split by what it saw; where all
 * was right (a prompt of thousands of tokens in one batch) it costs one batch. */
double hm_place_stream_plan(double copy_s, double cpu_tok_s, double gpu_s_tok, int n, double force,
                            bool seen);

/* The CPU's rate through a layer's CPU experts (tokens per second) after a layerwise batch of n
 * tokens in which the CPU took cpu_s for the fraction `share` (0, 1] of them: the mean of the
 * time per token before (from rate) and the one observed (cpu_s / share / n), so a batch moves
 * the estimate halfway and a single slow batch does not swing it. An observation that is not
 * positive and finite leaves rate as it is; a rate that is not sets it. */
double hm_place_rate_update(double rate, int n, double cpu_s, double share);

/* Dynamic placement (--dynamic-experts): of the layers with routed experts on both sides (gpu:
 * [n_layers][n_experts], nonzero on the GPU), the swap that gains the most: the layer's CPU
 * expert of the highest count for its GPU expert of the lowest, where the first count exceeds
 * the second by a quarter of it and by min_gain. True with *il, *in (to the GPU) and *out (to
 * the CPU); false when no swap pays. */
bool hm_dyn_pick(const double *counts, const uint8_t *gpu, int n_layers, int n_experts,
                 double min_gain, int *il, int *in, int *out);

void hm_place_describe(const hm_place_plan *plan, char *buf, size_t cap);

/* Activation counts: a text file "hmoe-expert-counts 1 LAYERS EXPERTS" then one line per layer
 * of EXPERTS counts. Reading checks the shape against the model's. */
hm_status hm_place_counts_write(const char *path, int n_layers, int n_experts,
                                const uint64_t *counts);
hm_status hm_place_counts_read(const char *path, int n_layers, int n_experts, uint64_t **out);

#endif
