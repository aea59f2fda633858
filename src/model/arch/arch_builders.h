/* arch_builders.h - the architectures' layer builders: each appends the nodes of all of a
 * model's layers (graph.h) over the layer views given (the model's, or a context's copies). */
#ifndef HM_MODEL_ARCH_BUILDERS_H
#define HM_MODEL_ARCH_BUILDERS_H

#include "model/graph.h"
#include "model/model.h"

hm_status hm_mixtral_build(const hm_model *m, const hm_layer *layers, hm_graph *g);
hm_status hm_qwen3moe_build(const hm_model *m, const hm_layer *layers, hm_graph *g);
hm_status hm_qwen2moe_build(const hm_model *m, const hm_layer *layers, hm_graph *g);
hm_status hm_glm4moe_build(const hm_model *m, const hm_layer *layers, hm_graph *g);
hm_status hm_deepseek2_build(const hm_model *m, const hm_layer *layers, hm_graph *g);
hm_status hm_gptoss_build(const hm_model *m, const hm_layer *layers, hm_graph *g);

#endif
