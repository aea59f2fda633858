/* backend.h - what a backend is to the executor: a name, which nodes it can run (op and weight
 * type), and a walk of a graph (or of a part of one) over a batch. A single op is a one-node
 * graph, which is how a GPU kernel is tested against its CPU twin. The CPU backend is
 * exec_cpu.c; the graph and its ops are graph.h. */
#ifndef HM_MODEL_BACKEND_H
#define HM_MODEL_BACKEND_H

#include <stdbool.h>

#include "model/graph.h"

typedef struct hm_backend_i {
    const char *name;
    /* true when the backend runs this node (its op, and for a matmul the weight's type) */
    bool (*supports)(void *self, const hm_node *node);
    /* runs the nodes of g in order over a batch of n tokens held in the backend's slots */
    hm_status (*compute)(void *self, const hm_graph *g, int n);
} hm_backend_i;

typedef struct hm_backend {
    const hm_backend_i *i;
    void *self;
} hm_backend;

#endif
