/* _hmoe.c - the CPython extension under the `hmoe` package: hmoe's CPU expert engine
 * (include/hmoe_moe.h) for one MoE layer, with tensors taken zero-copy through DLPack (torch,
 * numpy, anything with __dlpack__) or the buffer protocol.
 *
 *   MoE(model_path, layer, threads, mask=None, no_amx=False, repack=False)   weights of a GGUF
 *       file or a Hugging Face directory, mapped (not copied)
 *   MoE.from_tensors(gate, up, down, threads, act="silu", mask=None)          [E][I][H], [E][I][H],
 *       [E][H][I] float32 or bfloat16 tensors, kept referenced
 *   m.submit(x, ids, weights, out, accumulate=False)   x, out [n][H] float32/bfloat16; ids [n][k]
 *       int32/int64 (-1: skip); weights [n][k] float32. Returns at once.
 *   m.wait()            blocks until the submitted batch is in out (the GIL is released)
 *   m.set_mask(mask)    [E] bools/uint8: nonzero = the expert is computed elsewhere
 *   m.submit_on_stream(stream, ...) / m.wait_on_stream(stream)  the same as host functions
 *       enqueued on a CUDA stream (cudaLaunchHostFunc of the runtime already loaded, e.g. by torch)
 *
 * Every tensor's device (CPU or pinned host memory), dtype, shape and contiguity is checked, with
 * an error naming the argument: an FP16 tensor is never read as BF16. Each MoE owns its engine
 * and its thread pool; nothing is shared between objects. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "hmoe.h"
#include "hmoe_moe.h"
#include "model/model.h"
#include "quant/fp16.h"
#include "quant/types.h"

/* ---- DLPack (the structs of the DLPack specification, v0.8 ABI) ----------------------------- */

typedef struct {
    int32_t device_type; /* 1 CPU, 2 CUDA, 3 CUDA host (pinned) */
    int32_t device_id;
} dl_device;
typedef struct {
    uint8_t code; /* 0 int, 1 uint, 2 float, 4 bfloat */
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
    dl_tensor t;
    void *ctx;
    void (*deleter)(struct dl_managed *);
} dl_managed;

enum { DT_F32, DT_BF16, DT_F16, DT_I32, DT_I64, DT_U8, DT_BOOL, DT_OTHER };
static const char *const k_dt_name[] = {"float32", "bfloat16", "float16", "int32",
                                        "int64",   "uint8",    "bool",    "another dtype"};

/* a tensor seen through DLPack or the buffer protocol: owner keeps its memory alive */
typedef struct view {
    PyObject *owner;
    Py_buffer buf;
    bool has_buf;
    char *data;
    int ndim, dt;
    int64_t shape[4];
} view;

static void view_release(view *v) {
    if (v->has_buf) PyBuffer_Release(&v->buf);
    Py_CLEAR(v->owner);
    memset(v, 0, sizeof *v);
}

static int dl_dt(dl_dtype d) {
    if (d.lanes != 1) return DT_OTHER;
    if (d.code == 2 && d.bits == 32) return DT_F32;
    if (d.code == 2 && d.bits == 16) return DT_F16;
    if (d.code == 4 && d.bits == 16) return DT_BF16;
    if (d.code == 0 && d.bits == 32) return DT_I32;
    if (d.code == 0 && d.bits == 64) return DT_I64;
    if (d.code == 1 && d.bits == 8) return DT_U8;
    if (d.code == 6 && d.bits == 8) return DT_BOOL; /* kDLBool */
    return DT_OTHER;
}

static int fmt_dt(const char *f, Py_ssize_t itemsize) {
    if (!f) f = "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (!strcmp(f, "f")) return DT_F32;
    if (!strcmp(f, "e")) return DT_F16;
    if ((!strcmp(f, "i") || !strcmp(f, "l")) && itemsize == 4) return DT_I32;
    if ((!strcmp(f, "l") || !strcmp(f, "q")) && itemsize == 8) return DT_I64;
    if (!strcmp(f, "B")) return DT_U8;
    if (!strcmp(f, "?")) return DT_BOOL;
    return DT_OTHER;
}

static const size_t k_dt_size[] = {4, 2, 2, 4, 8, 1, 1, 0};

/* Views obj as a C-contiguous tensor in host memory; name is the argument's, for errors. */
static int get_view(PyObject *obj, const char *name, view *v) {
    memset(v, 0, sizeof *v);
    PyObject *cap = NULL;
    if (PyObject_HasAttrString(obj, "__dlpack__")) {
        cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
        if (!cap) return -1;
        dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
        if (!m) {
            Py_DECREF(cap);
            return -1;
        }
        const dl_tensor *t = &m->t;
        if (t->device.device_type != 1 && t->device.device_type != 3) {
            PyErr_Format(PyExc_ValueError,
                         "%s is on device type %d (CUDA is 2): the expert engine reads host "
                         "memory; give a CPU or pinned tensor",
                         name, t->device.device_type);
            Py_DECREF(cap);
            return -1;
        }
        if (t->ndim < 1 || t->ndim > 4) {
            PyErr_Format(PyExc_ValueError, "%s has %d dimensions", name, t->ndim);
            Py_DECREF(cap);
            return -1;
        }
        v->dt = dl_dt(t->dtype);
        v->ndim = t->ndim;
        int64_t expect = 1;
        bool contig = true;
        for (int i = t->ndim - 1; i >= 0; i--) {
            v->shape[i] = t->shape[i];
            if (t->strides && t->shape[i] > 1 && t->strides[i] != expect) contig = false;
            expect *= t->shape[i];
        }
        if (!contig) {
            PyErr_Format(PyExc_ValueError, "%s is not contiguous (call .contiguous() first)", name);
            Py_DECREF(cap);
            return -1;
        }
        v->data = (char *)t->data + t->byte_offset;
        v->owner = cap; /* its destructor calls the producer's deleter */
        return 0;
    }
    if (PyObject_GetBuffer(obj, &v->buf, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s must be a tensor with __dlpack__ or a C-contiguous buffer (got %s)", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    v->has_buf = true;
    if (v->buf.ndim < 1 || v->buf.ndim > 4) {
        PyErr_Format(PyExc_ValueError, "%s has %d dimensions", name, v->buf.ndim);
        view_release(v);
        return -1;
    }
    v->ndim = v->buf.ndim;
    for (int i = 0; i < v->ndim; i++) v->shape[i] = v->buf.shape[i];
    v->dt = fmt_dt(v->buf.format, v->buf.itemsize);
    v->data = v->buf.buf;
    Py_INCREF(obj);
    v->owner = obj;
    return 0;
}

/* the view's dtype is one of the allowed (a bitmask of DT_*) and its shape matches (-1: any) */
static int check_view(const view *v, const char *name, unsigned allowed, int ndim,
                      const int64_t *shape) {
    if (!(allowed & (1u << v->dt))) {
        char want[128] = "";
        for (int d = 0; d < DT_OTHER; d++)
            if (allowed & (1u << d)) {
                if (*want) strcat(want, " or ");
                strcat(want, k_dt_name[d]);
            }
        PyErr_Format(PyExc_TypeError, "%s is %s; expected %s", name, k_dt_name[v->dt], want);
        return -1;
    }
    bool ok = v->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || shape[i] == v->shape[i];
    if (!ok) {
        char got[96] = "", exp[96] = "";
        for (int i = 0; i < v->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                     (long long)v->shape[i]);
        for (int i = 0; i < ndim; i++) {
            if (shape[i] < 0)
                snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s*", i ? ", " : "");
            else
                snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? ", " : "",
                         (long long)shape[i]);
        }
        PyErr_Format(PyExc_ValueError, "%s has shape [%s]; expected [%s]", name, got, exp);
        return -1;
    }
    return 0;
}

/* ---- the MoE object ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD hm_moe *moe;
    hm_pool *pool;
    hm_model *model;    /* from a file, or NULL */
    hm_moe_expert *own; /* from tensors: the views */
    PyObject *keep[3];  /* from tensors: gate, up, down views' owners */
    view kg, ku, kd;
    int n_experts, top_k;
    int64_t hidden, inter;
    /* the batch in flight: its tensors stay referenced until wait */
    bool busy;
    view x, ids, w, out;
    int32_t *ids32; /* int64 ids converted, or NULL */
    float *w32;     /* bf16/f16 weights converted, or NULL */
    PyObject *err;  /* an error, raised at the next call */
    /* the stream variants: the call the stream runs next, and a host function's error (written
     * without the GIL, turned into err at the next call) */
    struct host_call *call;
    char stream_err[512];
} MoE;

static void drop_batch(MoE *self) {
    view_release(&self->x), view_release(&self->ids), view_release(&self->w),
        view_release(&self->out);
    PyMem_RawFree(self->ids32), PyMem_RawFree(self->w32);
    self->ids32 = NULL, self->w32 = NULL;
    self->busy = false;
}

static void wait_nogil(MoE *self) {
    if (!self->busy) return;
    Py_BEGIN_ALLOW_THREADS hm_moe_wait(self->moe);
    Py_END_ALLOW_THREADS drop_batch(self);
}

static void MoE_dealloc(MoE *self) {
    if (self->moe) wait_nogil(self);
    /* a call submitted on a stream and never waited on is left alone: the stream may still run
     * it (the wrapper keeps the object alive until its stream has passed wait_on_stream) */
    hm_moe_free(self->moe);
    hm_pool_free(self->pool);
    hm_model_free(self->model);
    PyMem_RawFree(self->own);
    view_release(&self->kg), view_release(&self->ku), view_release(&self->kd);
    Py_CLEAR(self->err);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *hm_err(const char *what) {
    PyErr_Format(PyExc_RuntimeError, "%s: %s", what, hm_last_error());
    return NULL;
}

static int mask_from(PyObject *o, int n, uint8_t **out) {
    *out = NULL;
    if (!o || o == Py_None) return 0;
    view v;
    if (get_view(o, "mask", &v) < 0) return -1;
    const int64_t shape[1] = {n};
    if (check_view(&v, "mask", (1u << DT_BOOL) | (1u << DT_U8) | (1u << DT_I32) | (1u << DT_I64), 1,
                   shape) < 0) {
        view_release(&v);
        return -1;
    }
    uint8_t *m = PyMem_RawMalloc((size_t)n);
    if (!m) {
        view_release(&v);
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const size_t es = k_dt_size[v.dt];
        int64_t x = 0;
        memcpy(&x, v.data + (size_t)i * es, es); /* little-endian: the low bytes */
        m[i] = x != 0;
    }
    view_release(&v);
    *out = m;
    return 0;
}

static int make_pool(MoE *self, int threads) {
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = threads;
    pp.async = true;
    pp.pin = threads > 0;
    if (hm_pool_create(&pp, &self->pool)) {
        hm_err("thread pool");
        return -1;
    }
    return 0;
}

static int create_engine(MoE *self, const hm_moe_expert *ex, hm_moe_act act, const uint8_t *mask,
                         bool no_amx, bool repack) {
    hm_moe_params mp = hm_moe_default_params();
    mp.n_experts = self->n_experts;
    mp.hidden = self->hidden, mp.inter = self->inter;
    mp.experts = ex;
    mp.act = act;
    mp.mask = mask;
    mp.pool = self->pool;
    mp.no_amx = no_amx;
    mp.repack = repack;
    if (act == HM_MOE_SWIGLU_OAI) mp.swiglu_alpha = 1.702f, mp.swiglu_limit = 7.0f;
    hm_status st;
    Py_BEGIN_ALLOW_THREADS st = hm_moe_create(&mp, &self->moe);
    Py_END_ALLOW_THREADS if (st) {
        hm_err("expert engine");
        return -1;
    }
    return 0;
}

static int MoE_init(MoE *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"model_path", "layer",  "threads",    "mask",
                          "no_amx",     "repack", "expert_map", NULL};
    const char *path;
    int layer, threads = 0, no_amx = 0, repack = 0;
    PyObject *mask_o = NULL, *map_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "si|iOppO", kwl, &path, &layer, &threads, &mask_o,
                                     &no_amx, &repack, &map_o))
        return -1;
    if (threads < 0) {
        PyErr_SetString(PyExc_ValueError, "threads must be >= 0 (0: one per physical core)");
        return -1;
    }
    hm_model_params mp = hm_model_default_params();
    mp.load = HM_LOAD_MMAP;
    hm_status st;
    Py_BEGIN_ALLOW_THREADS st = hm_model_load_ex(path, &mp, &self->model);
    Py_END_ALLOW_THREADS if (st) {
        hm_err("load");
        return -1;
    }
    const hm_hparams *hp = &self->model->hp;
    if (layer < 0 || layer >= (int)hp->n_layers || !self->model->layers[layer].moe) {
        PyErr_Format(PyExc_ValueError, "%s: layer %d is not a MoE layer (the model has %d layers)",
                     path, layer, (int)hp->n_layers);
        return -1;
    }
    self->n_experts = (int)hp->n_experts, self->top_k = (int)hp->n_experts_used;
    self->hidden = hp->hidden, self->inter = hp->moe_inter;
    const hm_moe_expert *ex = self->model->layers[layer].experts;
    if (map_o && map_o != Py_None) { /* physical expert i computes logical expert map[i] */
        PyObject *seq = PySequence_Fast(map_o, "expert_map must be a sequence of expert ids");
        if (!seq) return -1;
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n != self->n_experts) {
            PyErr_Format(PyExc_ValueError, "expert_map has %zd entries; the layer has %d experts",
                         n, self->n_experts);
            Py_DECREF(seq);
            return -1;
        }
        if (!(self->own = PyMem_RawCalloc((size_t)n, sizeof(hm_moe_expert)))) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            const long e = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
            if (e < 0 || e >= self->n_experts) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "expert_map[%zd] = %ld is outside [0, %d)", i, e,
                                 self->n_experts);
                Py_DECREF(seq);
                return -1;
            }
            self->own[i] = ex[e];
        }
        Py_DECREF(seq);
        ex = self->own;
    }
    uint8_t *mask = NULL;
    if (mask_from(mask_o, self->n_experts, &mask) < 0 || make_pool(self, threads) < 0) {
        PyMem_RawFree(mask);
        return -1;
    }
    const int rc = create_engine(self, ex, HM_MOE_SILU, mask, no_amx, repack);
    PyMem_RawFree(mask);
    return rc;
}

static PyObject *MoE_from_tensors(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"gate", "up", "down", "threads", "act", "mask", "no_amx", NULL};
    PyObject *g, *u, *d, *mask_o = NULL;
    int threads = 0, no_amx = 0;
    const char *act_s = "silu";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|isOp", kwl, &g, &u, &d, &threads, &act_s,
                                     &mask_o, &no_amx))
        return NULL;
    hm_moe_act act;
    if (!strcmp(act_s, "silu"))
        act = HM_MOE_SILU;
    else if (!strcmp(act_s, "gelu"))
        act = HM_MOE_GELU;
    else if (!strcmp(act_s, "swiglu_oai"))
        act = HM_MOE_SWIGLU_OAI;
    else {
        PyErr_Format(PyExc_ValueError, "act '%s': expected silu, gelu or swiglu_oai", act_s);
        return NULL;
    }
    MoE *self = (MoE *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    const unsigned fl = (1u << DT_F32) | (1u << DT_BF16);
    if (get_view(g, "gate", &self->kg) < 0 || get_view(u, "up", &self->ku) < 0 ||
        get_view(d, "down", &self->kd) < 0)
        goto fail;
    if (self->kg.ndim != 3) {
        PyErr_SetString(PyExc_ValueError, "gate must be [experts][intermediate][hidden]");
        goto fail;
    }
    self->n_experts = (int)self->kg.shape[0];
    self->inter = self->kg.shape[1], self->hidden = self->kg.shape[2];
    const int64_t sg[3] = {self->n_experts, self->inter, self->hidden};
    const int64_t sd[3] = {self->n_experts, self->hidden, self->inter};
    if (check_view(&self->kg, "gate", fl, 3, sg) < 0 ||
        check_view(&self->ku, "up", fl, 3, sg) < 0 || check_view(&self->kd, "down", fl, 3, sd) < 0)
        goto fail;
    if (self->kg.dt != self->ku.dt || self->kg.dt != self->kd.dt) {
        PyErr_SetString(PyExc_TypeError, "gate, up and down must have one dtype");
        goto fail;
    }
    const uint32_t type_id = self->kg.dt == DT_F32 ? HM_TYPE_F32 : HM_TYPE_BF16;
    const size_t es = k_dt_size[self->kg.dt];
    self->own = PyMem_RawCalloc((size_t)self->n_experts, sizeof(hm_moe_expert));
    if (!self->own) {
        PyErr_NoMemory();
        goto fail;
    }
    const size_t mat = (size_t)self->inter * (size_t)self->hidden * es;
    for (int e = 0; e < self->n_experts; e++) {
        hm_moe_expert *x = &self->own[e];
        x->gate = (hm_moe_matrix){type_id, self->kg.data + (size_t)e * mat, 0};
        x->up = (hm_moe_matrix){type_id, self->ku.data + (size_t)e * mat, 0};
        x->down = (hm_moe_matrix){type_id, self->kd.data + (size_t)e * mat, 0};
    }
    uint8_t *mask = NULL;
    if (mask_from(mask_o, self->n_experts, &mask) < 0 || make_pool(self, threads) < 0) {
        PyMem_RawFree(mask);
        goto fail;
    }
    const int rc = create_engine(self, self->own, act, mask, no_amx, false);
    PyMem_RawFree(mask);
    if (rc < 0) goto fail;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int raise_pending(MoE *self) {
    if (!self->err) return 0;
    PyErr_SetObject(PyExc_RuntimeError, self->err);
    Py_CLEAR(self->err);
    return -1;
}

/* takes the batch's tensors and checks them; on success the batch is ready to submit */
static int take_batch(MoE *self, PyObject *x, PyObject *ids, PyObject *w, PyObject *out, int *n,
                      int *k, bool convert) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a batch is in flight: call wait() (sync_forward) before the next submit");
        return -1;
    }
    const unsigned act = (1u << DT_F32) | (1u << DT_BF16);
    if (get_view(x, "hidden_states", &self->x) < 0 || get_view(ids, "topk_ids", &self->ids) < 0 ||
        get_view(w, "topk_weights", &self->w) < 0 || get_view(out, "output", &self->out) < 0)
        goto fail;
    *n = (int)self->x.shape[0];
    *k = self->ids.ndim == 2 ? (int)self->ids.shape[1] : -1;
    const int64_t sx[2] = {*n, self->hidden}, sk[2] = {*n, *k};
    if (check_view(&self->x, "hidden_states", act, 2, sx) < 0 ||
        check_view(&self->out, "output", act, 2, sx) < 0 ||
        check_view(&self->ids, "topk_ids", (1u << DT_I32) | (1u << DT_I64), 2, sk) < 0 ||
        check_view(&self->w, "topk_weights", (1u << DT_F32) | (1u << DT_BF16) | (1u << DT_F16), 2,
                   sk) < 0)
        goto fail;
    if (!convert) return 0;
    if (self->ids.dt == DT_I64) {
        const size_t c = (size_t)*n * (size_t)*k;
        if (!(self->ids32 = PyMem_RawMalloc(c * sizeof(int32_t) + 1))) {
            PyErr_NoMemory();
            goto fail;
        }
        const int64_t *s = (const int64_t *)self->ids.data;
        for (size_t i = 0; i < c; i++) {
            if (s[i] < -1 || s[i] >= self->n_experts) {
                PyErr_Format(PyExc_ValueError, "topk_ids[%zu] = %lld is outside [-1, %d)", i,
                             (long long)s[i], self->n_experts);
                goto fail;
            }
            self->ids32[i] = (int32_t)s[i];
        }
    }
    if (self->w.dt != DT_F32) {
        const size_t c = (size_t)*n * (size_t)*k;
        if (!(self->w32 = PyMem_RawMalloc(c * sizeof(float) + 1))) {
            PyErr_NoMemory();
            goto fail;
        }
        const uint16_t *s = (const uint16_t *)self->w.data;
        for (size_t i = 0; i < c; i++)
            self->w32[i] = self->w.dt == DT_BF16 ? hm_bf16_to_f32(s[i]) : hm_f16_to_f32(s[i]);
    }
    return 0;
fail:
    drop_batch(self);
    return -1;
}

static hm_status do_submit(MoE *self, int n, int k, bool acc) {
    return hm_moe_submit(self->moe, self->x.data, self->x.dt == DT_F32 ? HM_MOE_F32 : HM_MOE_BF16,
                         self->ids32 ? self->ids32 : (const int32_t *)self->ids.data,
                         self->w32 ? self->w32 : (const float *)self->w.data, n, k, self->out.data,
                         self->out.dt == DT_F32 ? HM_MOE_F32 : HM_MOE_BF16, acc);
}

static PyObject *MoE_submit(MoE *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"hidden_states", "topk_ids",   "topk_weights",
                          "output",        "accumulate", NULL};
    PyObject *x, *ids, *w, *out;
    int acc = 0, n, k;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|p", kwl, &x, &ids, &w, &out, &acc))
        return NULL;
    if (raise_pending(self) < 0 || take_batch(self, x, ids, w, out, &n, &k, true) < 0) return NULL;
    if (do_submit(self, n, k, acc)) {
        drop_batch(self);
        return hm_err("submit");
    }
    self->busy = true;
    Py_RETURN_NONE;
}

static PyObject *MoE_wait(MoE *self, PyObject *noargs) {
    (void)noargs;
    wait_nogil(self);
    if (raise_pending(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *MoE_set_mask(MoE *self, PyObject *arg) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "set_mask while a batch is in flight");
        return NULL;
    }
    uint8_t *mask = NULL;
    if (mask_from(arg, self->n_experts, &mask) < 0) return NULL;
    hm_status st = hm_moe_set_mask(self->moe, mask);
    PyMem_RawFree(mask);
    if (st) return hm_err("set_mask");
    Py_RETURN_NONE;
}

/* ---- CUDA streams: host functions through the runtime the process already loaded ----------- */

typedef int (*launch_host_fn)(void *stream, void (*fn)(void *), void *data);

static launch_host_fn cuda_launch(void) {
    static launch_host_fn f;
    static bool tried;
    if (tried) return f;
    tried = true;
    /* HMOE_CUDART names the library to take it from (tests: a stand-in that runs the functions
     * in order on a thread); else the runtime the process has loaded, else one on the path */
    const char *env = getenv("HMOE_CUDART");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW);
        return f = h ? (launch_host_fn)dlsym(h, "cudaLaunchHostFunc") : NULL;
    }
    static const char *const libs[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                       "libcudart.so"};
    for (size_t i = 0; i < sizeof libs / sizeof *libs && !f; i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD);
        if (!h) h = dlopen(libs[i], RTLD_NOW);
        if (h) f = (launch_host_fn)dlsym(h, "cudaLaunchHostFunc");
    }
    if (!f) f = (launch_host_fn)dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc");
    return f;
}

/* One batch as the stream will run it. The tensors are read when the stream reaches the host
 * function (after the copies queued before it), so the conversions happen there too; nothing in
 * it touches Python objects, and the caller keeps the tensors alive (persistent buffers). */
typedef struct host_call {
    MoE *self;
    void *x, *out;
    const void *ids, *w;
    int x_dt, ids_dt, w_dt, out_dt, n, k;
    bool acc;
    int32_t *ids32;
    float *w32;
    uint8_t *mask; /* the mask to apply first, or NULL */
} host_call;

static void call_free(host_call *c) {
    if (!c) return;
    free(c->ids32), free(c->w32), free(c->mask);
    free(c);
}

static void host_submit(void *p) {
    host_call *c = p;
    MoE *self = c->self;
    const size_t nk = (size_t)c->n * (size_t)c->k;
    const int32_t *ids = c->ids;
    const float *w = c->w;
    if (c->ids_dt == DT_I64) {
        const int64_t *s = c->ids;
        for (size_t i = 0; i < nk; i++)
            c->ids32[i] = s[i] < -1 || s[i] >= self->n_experts ? -1 : (int32_t)s[i];
        ids = c->ids32;
    }
    if (c->w_dt == DT_BF16) {
        const uint16_t *s = c->w;
        for (size_t i = 0; i < nk; i++) c->w32[i] = hm_bf16_to_f32(s[i]);
        w = c->w32;
    }
    hm_status st = c->mask ? hm_moe_set_mask(self->moe, c->mask) : HM_OK;
    if (!st)
        st = hm_moe_submit(self->moe, c->x, c->x_dt == DT_F32 ? HM_MOE_F32 : HM_MOE_BF16, ids, w,
                           c->n, c->k, c->out, c->out_dt == DT_F32 ? HM_MOE_F32 : HM_MOE_BF16,
                           c->acc);
    if (st) snprintf(self->stream_err, sizeof self->stream_err, "submit: %s", hm_last_error());
}

static void host_wait(void *p) {
    host_call *c = p;
    hm_moe_wait(c->self->moe);
    call_free(c);
}

static int stream_error(MoE *self) {
    if (!self->stream_err[0]) return 0;
    PyErr_SetString(PyExc_RuntimeError, self->stream_err);
    self->stream_err[0] = '\0';
    return -1;
}

static PyObject *MoE_submit_on_stream(MoE *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"stream", "hidden_states", "topk_ids", "topk_weights",
                          "output", "accumulate",    "mask",     NULL};
    unsigned long long stream;
    PyObject *x, *ids, *w, *out, *mask_o = NULL;
    int acc = 0, n, k;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "KOOOO|pO", kwl, &stream, &x, &ids, &w, &out, &acc,
                                     &mask_o))
        return NULL;
    launch_host_fn launch = cuda_launch();
    if (!launch) {
        PyErr_SetString(PyExc_RuntimeError,
                        "no CUDA runtime in this process (cudaLaunchHostFunc): import torch "
                        "with CUDA first, or call submit() without a stream");
        return NULL;
    }
    if (raise_pending(self) < 0 || stream_error(self) < 0) return NULL;
    if (self->call) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a batch is submitted on the stream: wait_on_stream before the next one");
        return NULL;
    }
    /* checks only: the values are read when the stream gets there */
    if (take_batch(self, x, ids, w, out, &n, &k, false) < 0) return NULL;
    host_call *c = calloc(1, sizeof *c);
    const size_t nk = (size_t)n * (size_t)k;
    if (c) {
        *c = (host_call){.self = self,
                         .x = self->x.data,
                         .out = self->out.data,
                         .ids = self->ids.data,
                         .w = self->w.data,
                         .x_dt = self->x.dt,
                         .ids_dt = self->ids.dt,
                         .w_dt = self->w.dt,
                         .out_dt = self->out.dt,
                         .n = n,
                         .k = k,
                         .acc = acc != 0};
        c->ids32 = malloc(nk * sizeof(int32_t) + 4), c->w32 = malloc(nk * sizeof(float) + 4);
    }
    drop_batch(self); /* the caller keeps the tensors alive (see above) */
    if (!c || !c->ids32 || !c->w32) {
        call_free(c);
        return PyErr_NoMemory();
    }
    if (c->w_dt == DT_F16) {
        call_free(c);
        PyErr_SetString(PyExc_TypeError,
                        "topk_weights: float16 on a stream; give float32 or bfloat16");
        return NULL;
    }
    if (mask_from(mask_o, self->n_experts, &c->mask) < 0) {
        call_free(c);
        return NULL;
    }
    const int rc = launch((void *)(uintptr_t)stream, host_submit, c);
    if (rc) {
        call_free(c);
        PyErr_Format(PyExc_RuntimeError, "cudaLaunchHostFunc failed with CUDA error %d", rc);
        return NULL;
    }
    self->call = c;
    Py_RETURN_NONE;
}

/* Enqueues the wait for the batch submit_on_stream enqueued. */
static PyObject *MoE_wait_on_stream(MoE *self, PyObject *args) {
    unsigned long long stream;
    if (!PyArg_ParseTuple(args, "K", &stream)) return NULL;
    launch_host_fn launch = cuda_launch();
    if (!launch || !self->call) {
        PyErr_SetString(PyExc_RuntimeError, launch ? "nothing was submitted on a stream"
                                                   : "no CUDA runtime in this process");
        return NULL;
    }
    const int rc = launch((void *)(uintptr_t)stream, host_wait, self->call);
    if (rc) {
        PyErr_Format(PyExc_RuntimeError, "cudaLaunchHostFunc failed with CUDA error %d", rc);
        return NULL;
    }
    self->call = NULL; /* host_wait frees it */
    Py_RETURN_NONE;
}

static PyObject *MoE_get(MoE *self, void *which) {
    switch ((int)(intptr_t)which) {
    case 0:
        return PyLong_FromLong(self->n_experts);
    case 1:
        return PyLong_FromLongLong(self->hidden);
    case 2:
        return PyLong_FromLongLong(self->inter);
    case 3:
        return PyLong_FromLong(self->top_k);
    default:
        return PyBool_FromLong(self->busy);
    }
}

static PyMethodDef MoE_methods[] = {
    {"from_tensors", (PyCFunction)(void (*)(void))MoE_from_tensors,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_tensors(gate, up, down, threads=0, act='silu', mask=None, no_amx=False)"},
    {"submit", (PyCFunction)(void (*)(void))MoE_submit, METH_VARARGS | METH_KEYWORDS,
     "submit(hidden_states, topk_ids, topk_weights, output, accumulate=False)"},
    {"wait", (PyCFunction)MoE_wait, METH_NOARGS, "wait until the submitted batch is done"},
    {"set_mask", (PyCFunction)MoE_set_mask, METH_O, "set_mask(mask): nonzero = skipped"},
    {"submit_on_stream", (PyCFunction)(void (*)(void))MoE_submit_on_stream,
     METH_VARARGS | METH_KEYWORDS,
     "submit_on_stream(stream, hidden_states, topk_ids, topk_weights, output, accumulate=False)"},
    {"wait_on_stream", (PyCFunction)MoE_wait_on_stream, METH_VARARGS, "wait_on_stream(stream)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef MoE_getset[] = {{"num_experts", (getter)MoE_get, NULL, NULL, (void *)0},
                                   {"hidden_size", (getter)MoE_get, NULL, NULL, (void *)1},
                                   {"intermediate_size", (getter)MoE_get, NULL, NULL, (void *)2},
                                   {"num_experts_per_tok", (getter)MoE_get, NULL, NULL, (void *)3},
                                   {"busy", (getter)MoE_get, NULL, NULL, (void *)4},
                                   {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject MoE_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hmoe._hmoe.MoE",
    .tp_basicsize = sizeof(MoE),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "hmoe's CPU expert engine for one MoE layer",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)MoE_init,
    .tp_dealloc = (destructor)MoE_dealloc,
    .tp_methods = MoE_methods,
    .tp_getset = MoE_getset,
};

static PyObject *version(PyObject *m, PyObject *noargs) {
    (void)m, (void)noargs;
    return PyUnicode_FromString(hm_version());
}

static PyMethodDef module_methods[] = {{"version", version, METH_NOARGS, "hmoe's version"},
                                       {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
                                    "_hmoe",
                                    "hmoe's CPU expert engine",
                                    -1,
                                    module_methods,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__hmoe(void) {
    if (PyType_Ready(&MoE_type) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&MoE_type);
    if (PyModule_AddObject(m, "MoE", (PyObject *)&MoE_type) < 0) {
        Py_DECREF(&MoE_type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
