/* tok_int.h - internal layout of hm_tokenizer shared by the loaders, the encoders and the decoder.
 */
#ifndef HM_TOKENIZER_TOK_INT_H
#define HM_TOKENIZER_TOK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

#define HM_TOK_MAX_REGEX 6
#define HM_TOK_MAX_VOCAB (1u << 24) /* 16M tokens: far above any real vocabulary */

/* per-token flags (tok->flags) */
enum {
    HM_TF_EOG = 1u << 0,
    HM_TF_LSTRIP = 1u << 1, /* special token eats whitespace on its left (HF lstrip) */
    HM_TF_RSTRIP = 1u << 2,
    HM_TF_MERGEABLE = 1u << 3, /* may be produced by BPE/SPM merges from text */
};

/* Open-addressing set of token ids keyed by a byte string (tok->key_off/key_len into key_buf). */
typedef struct hm_strmap {
    uint32_t *slots; /* id + 1, 0 = empty */
    uint32_t mask;
} hm_strmap;

/* (left id, right id) -> (rank, merged id) for merges-based BPE. */
typedef struct hm_pair_slot {
    uint64_t key; /* (left << 32) | right; UINT64_MAX = empty */
    int32_t rank;
    int32_t merged;
} hm_pair_slot;

typedef struct hm_pairmap {
    hm_pair_slot *slots;
    uint64_t mask;
    uint64_t count;
} hm_pairmap;

/* A growable byte buffer. */
typedef struct hm_tbuf {
    char *p;
    size_t n, cap;
} hm_tbuf;

/* One step of a Hugging Face normalizer (a Sequence is flattened into its steps). */
typedef enum hm_norm_kind {
    HM_NORM_NFC = 1,
    HM_NORM_NFD,
    HM_NORM_NFKC,
    HM_NORM_NFKD,
    HM_NORM_LOWERCASE,
    HM_NORM_STRIP,
    HM_NORM_PREPEND,
    HM_NORM_REPLACE,
} hm_norm_kind;

typedef struct hm_norm_step {
    hm_norm_kind kind;
    bool left, right; /* Strip */
    char *pattern;    /* Replace: literal pattern (owned), when re is NULL */
    size_t pattern_len;
    void *re;      /* Replace: pcre2_code * (owned) for a Regex pattern */
    char *content; /* Prepend: the prefix; Replace: the replacement (owned) */
    size_t content_len;
} hm_norm_step;

#define HM_TOK_MAX_NORM 16

typedef enum hm_bpe_mode {
    HM_BPE_MERGES = 0, /* merge ranks from a merges list (GGUF, HF) */
    HM_BPE_RANKS,      /* tiktoken: rank of the merged bytes (= its id) */
} hm_bpe_mode;

struct hm_tokenizer {
    hm_tok_kind kind;
    char pre_name[48];
    char source[256]; /* path or name, for messages */
    uint32_t n;

    /* vocabulary text as stored (NUL-terminated, [EMPTY_i] never substituted) */
    uint32_t *text_off, *text_len;
    hm_tbuf text;
    /* decoded bytes of each token */
    uint32_t *piece_off, *piece_len;
    hm_tbuf piece;
    float *score;
    uint8_t *type;  /* hm_tok_type */
    uint8_t *flags; /* HM_TF_* */

    /* the encoder's key space: BPE = piece bytes, SPM/WPM = vocabulary text */
    const hm_tbuf *key_buf;
    const uint32_t *key_off, *key_len;
    hm_strmap map;

    hm_bpe_mode bpe_mode;
    hm_pairmap merges;
    bool ignore_merges;   /* llama3: a word that is a token is emitted whole */
    bool raw_bytes;       /* tiktoken: vocabulary text is raw bytes (no GPT-2 alphabet) */
    int32_t byte_id[256]; /* BPE: the single-byte token; SPM: <0xXX>; -1 when absent */

    int32_t *specials; /* control / unknown / user-defined ids, longest text first */
    uint32_t n_specials;

    int32_t bos, eos, eot, eom, unk, pad, sep;
    bool add_bos, add_eos, add_sep;
    bool add_space_prefix, remove_extra_ws, escape_ws; /* SPM normalizer */
    bool lowercase, strip_accents;                     /* WPM normalizer */
    uint32_t max_token_len;

    void *re[HM_TOK_MAX_REGEX]; /* pcre2_code * */
    int n_re;

    hm_norm_step norm[HM_TOK_MAX_NORM]; /* applied in order to every text fragment */
    int n_norm;
    char norm_name[HM_TOK_MAX_NORM * 10]; /* "NFKD+Lowercase" */
};

/* Hash of a byte string (map keys, word cache). */
static inline uint64_t hm_tok_hash(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)(uint8_t)s[i] << (8 * i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return h;
}

/* ---- building (loaders) ---------------------------------------------------------------------- */
hm_status hm_tok_alloc(hm_tok_kind kind, uint32_t n, const char *source, hm_tokenizer **out);
/* Sets token id's vocabulary text (bytes, need not be NUL-free), score and type. */
hm_status hm_tok_set(hm_tokenizer *t, uint32_t id, const char *text, size_t len, float score,
                     int type);
/* After every token is set: pieces, maps, specials, EOG set, pre-tokenizer. pre may be NULL
 * ("default"). Merges are added after this with hm_tok_add_merge. */
hm_status hm_tok_finalize(hm_tokenizer *t, const char *pre);
/* Adds merge "left right" (vocabulary text, GPT-2 alphabet unless raw_bytes) with rank. Returns
 * HM_ERR_NOT_FOUND when a side or the result is not a token. */
hm_status hm_tok_add_merge(hm_tokenizer *t, const char *left, size_t llen, const char *right,
                           size_t rlen, int32_t rank);
hm_status hm_tok_merges_reserve(hm_tokenizer *t, uint64_t n);
/* Looks up a token by its encoder key (BPE: bytes; SPM/WPM: text). */
int32_t hm_tok_lookup(const hm_tokenizer *t, const char *key, size_t len);
/* Looks up by vocabulary text (linear-free: uses the map for SPM/WPM, text compare otherwise). */
int32_t hm_tok_find_text(const hm_tokenizer *t, const char *text, size_t len);
/* Selects the pre-tokenizer by llama.cpp name; HM_ERR_UNSUPPORTED for unknown names. */
hm_status hm_tok_set_pre(hm_tokenizer *t, const char *pre);
/* Recomputes the sorted special-token list (after types/flags changed). */
hm_status hm_tok_build_specials(hm_tokenizer *t);

/* ---- normalizers (normalize.c) ----------------------------------------------------------------
 */
/* Runs t's normalizer over s[0..n): *res points at s itself when there are no steps, else into
 * one of the two scratch buffers. */
hm_status hm_tok_normalize(const hm_tokenizer *t, const char *s, size_t n, hm_tbuf bufs[2],
                           const char **res, size_t *res_len);
/* Appends a step: t owns its strings and regex from then on (on failure the caller keeps them). */
hm_status hm_tok_norm_add(hm_tokenizer *t, const hm_norm_step *step);
void hm_tok_norm_clear(hm_tokenizer *t);
const char *hm_tok_norm_name(hm_norm_kind k);

/* GPT-2 byte-level alphabet: decodes text to bytes; false when a code point is not in it. */
bool hm_tok_gpt2_decode(const char *s, size_t n, hm_tbuf *out);

/* buffers */
hm_status hm_tbuf_put(hm_tbuf *b, const void *p, size_t n);
void hm_tbuf_free(hm_tbuf *b);

/* UTF-8: length of the sequence a lead byte announces (1 for invalid leads, like llama.cpp). */
static inline size_t hm_utf8_len(uint8_t c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

/* WordPiece pre-tokenization helpers (unicode.c) */
uint32_t hm_utf8_decode(const uint8_t *s, size_t n, size_t *adv); /* 0xFFFD on invalid */
size_t hm_utf8_encode(uint32_t cp, char *out);
bool hm_uni_is_whitespace(uint32_t cp);
bool hm_uni_is_control(uint32_t cp);
bool hm_uni_is_punct(uint32_t cp);
bool hm_uni_is_symbol(uint32_t cp);
bool hm_uni_is_mark(uint32_t cp); /* Mn */
uint32_t hm_uni_tolower(uint32_t cp);
/* canonical decomposition with marks removed: writes base code points, returns count (<= 4) */
size_t hm_uni_strip_accents(uint32_t cp, uint32_t out[4]);

#endif
