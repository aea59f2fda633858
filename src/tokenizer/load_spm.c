/* load_spm.c - SentencePiece ModelProto (protobuf) reader: pieces {piece, score, type},
 * trainer_spec {model_type, byte_fallback, unk/bos/eos/pad ids} and normalizer_spec
 * {add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces}. Only BPE models. */
#include <stdio.h>
#include <string.h>

#include "tokenizer/tok_int.h"

typedef struct pb {
    const uint8_t *p, *end;
} pb;

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static bool pb_varint(pb *b, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return false;
        uint8_t c = *b->p++;
        x |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Reads a field header and its payload; for LEN fields *sub is the payload. */
typedef struct pb_field {
    uint32_t num, wt;
    uint64_t v;
    pb sub;
} pb_field;

static bool pb_next(pb *b, pb_field *f) {
    uint64_t key;
    if (!pb_varint(b, &key)) return false;
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    switch (f->wt) {
    case WT_VARINT:
        return pb_varint(b, &f->v);
    case WT_I64:
        if (b->end - b->p < 8) return false;
        memcpy(&f->v, b->p, 8);
        b->p += 8;
        return true;
    case WT_I32: {
        if (b->end - b->p < 4) return false;
        uint32_t u;
        memcpy(&u, b->p, 4);
        f->v = u;
        b->p += 4;
        return true;
    }
    case WT_LEN: {
        uint64_t n;
        if (!pb_varint(b, &n) || n > (uint64_t)(b->end - b->p)) return false;
        f->sub.p = b->p;
        f->sub.end = b->p + n;
        b->p += n;
        return true;
    }
    default:
        return false;
    }
}

typedef struct spm_piece {
    const char *s;
    size_t n;
    float score;
    int type;
} spm_piece;

static bool read_piece(pb sub, spm_piece *o) {
    o->s = "";
    o->n = 0;
    o->score = 0;
    o->type = HM_TOKT_NORMAL;
    pb_field f;
    while (sub.p < sub.end) {
        if (!pb_next(&sub, &f)) return false;
        if (f.num == 1 && f.wt == WT_LEN) {
            o->s = (const char *)f.sub.p;
            o->n = (size_t)(f.sub.end - f.sub.p);
        } else if (f.num == 2 && f.wt == WT_I32) {
            uint32_t u = (uint32_t)f.v;
            memcpy(&o->score, &u, 4);
        } else if (f.num == 3 && f.wt == WT_VARINT) {
            o->type = (int)f.v;
        }
    }
    return true;
}

typedef struct spm_spec {
    int model_type; /* 1 unigram, 2 bpe, 3 word, 4 char */
    bool byte_fallback;
    int64_t unk, bos, eos, pad;
    bool add_dummy_prefix, remove_extra_ws, escape_ws;
} spm_spec;

static bool read_trainer(pb sub, spm_spec *s) {
    pb_field f;
    while (sub.p < sub.end) {
        if (!pb_next(&sub, &f)) return false;
        if (f.wt != WT_VARINT) continue;
        switch (f.num) {
        case 3:
            s->model_type = (int)f.v;
            break;
        case 35:
            s->byte_fallback = f.v != 0;
            break;
        case 40:
            s->unk = (int32_t)f.v;
            break;
        case 41:
            s->bos = (int32_t)f.v;
            break;
        case 42:
            s->eos = (int32_t)f.v;
            break;
        case 43:
            s->pad = (int32_t)f.v;
            break;
        }
    }
    return true;
}

static bool read_normalizer(pb sub, spm_spec *s) {
    pb_field f;
    while (sub.p < sub.end) {
        if (!pb_next(&sub, &f)) return false;
        if (f.wt != WT_VARINT) continue;
        if (f.num == 3) s->add_dummy_prefix = f.v != 0;
        if (f.num == 4) s->remove_extra_ws = f.v != 0;
        if (f.num == 5) s->escape_ws = f.v != 0;
    }
    return true;
}

hm_status hm_tokenizer_from_spm_memory(const void *data, size_t size, const char *name,
                                       hm_tokenizer **out) {
    *out = NULL;
    spm_spec spec = {.model_type = 1,
                     .unk = 0,
                     .bos = 1,
                     .eos = 2,
                     .pad = -1,
                     .add_dummy_prefix = true,
                     .remove_extra_ws = true,
                     .escape_ws = true};
    pb b = {(const uint8_t *)data, (const uint8_t *)data + size};
    uint64_t n = 0;
    pb_field f;
    /* pass 1: count pieces, read the specs */
    while (b.p < b.end) {
        if (!pb_next(&b, &f))
            return hm_errorf(HM_ERR_FORMAT, "%s: not a SentencePiece model (bad protobuf at %zu)",
                             name, (size_t)(b.p - (const uint8_t *)data));
        if (f.num == 1 && f.wt == WT_LEN) n++;
        if (f.num == 2 && f.wt == WT_LEN && !read_trainer(f.sub, &spec))
            return hm_errorf(HM_ERR_FORMAT, "%s: bad trainer_spec", name);
        if (f.num == 3 && f.wt == WT_LEN && !read_normalizer(f.sub, &spec))
            return hm_errorf(HM_ERR_FORMAT, "%s: bad normalizer_spec", name);
    }
    if (n == 0) return hm_errorf(HM_ERR_FORMAT, "%s: SentencePiece model without pieces", name);
    if (n > HM_TOK_MAX_VOCAB)
        return hm_errorf(HM_ERR_FORMAT, "%s: %llu pieces", name, (unsigned long long)n);
    if (spec.model_type != 2)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: SentencePiece model_type %d: only BPE (2) is supported", name,
                         spec.model_type);
    hm_tokenizer *t;
    hm_status st = hm_tok_alloc(HM_TOK_SPM, (uint32_t)n, name, &t);
    if (st) return st;
    b.p = (const uint8_t *)data;
    uint32_t id = 0;
    while (b.p < b.end && !st) {
        pb_next(&b, &f); /* validated in pass 1 */
        if (f.num != 1 || f.wt != WT_LEN) continue;
        spm_piece p;
        if (!read_piece(f.sub, &p)) {
            st = hm_errorf(HM_ERR_FORMAT, "%s: piece %u is malformed", name, id);
            break;
        }
        st = hm_tok_set(t, id++, p.s, p.n, p.score, p.type);
    }
    t->unk = spec.unk >= 0 && spec.unk < (int64_t)n ? (int32_t)spec.unk : HM_TOKEN_NONE;
    t->bos = spec.bos >= 0 && spec.bos < (int64_t)n ? (int32_t)spec.bos : HM_TOKEN_NONE;
    t->eos = spec.eos >= 0 && spec.eos < (int64_t)n ? (int32_t)spec.eos : HM_TOKEN_NONE;
    t->pad = spec.pad >= 0 && spec.pad < (int64_t)n ? (int32_t)spec.pad : HM_TOKEN_NONE;
    t->add_bos = t->bos >= 0;
    t->add_space_prefix = spec.add_dummy_prefix;
    t->remove_extra_ws = spec.remove_extra_ws;
    t->escape_ws = spec.escape_ws;
    if (!st) st = hm_tok_finalize(t, NULL);
    if (!st)
        snprintf(t->pre_name, sizeof t->pre_name, "%s", spec.byte_fallback ? "spm-byte" : "spm");
    if (st) {
        hm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HM_OK;
}
