/* tokenizer.h - text <-> token ids: byte-level BPE (GPT-2 / Llama-3 / Qwen2 / DeepSeek / o200k
 * families), SentencePiece BPE (Llama-2, Mistral/Mixtral, Phi-3) and WordPiece (BERT), loaded from
 * GGUF files, Hugging Face directories, tiktoken rank files or SentencePiece .model files.
 * Tokenization matches llama.cpp (src/llama-vocab.cpp) and so the Hugging Face reference.
 *
 * Usage:
 *
 *     hm_tokenizer *tok;
 *     if (hm_tokenizer_load("Qwen3-30B-A3B/", &tok) != HM_OK) die(hm_last_error());
 *     int32_t *ids; size_t n;
 *     hm_tokenizer_encode_alloc(tok, text, strlen(text), HM_TOK_ADD_SPECIAL, &ids, &n);
 *     hm_detok *d;
 *     hm_detok_new(tok, HM_DETOK_SPECIAL, &d);
 *     for (size_t i = 0; i < n; i++) {          // e.g. while sampling
 *         const char *s; size_t len;
 *         hm_detok_push(d, ids[i], &s, &len);  // only complete UTF-8 comes out
 *         fwrite(s, 1, len, stdout);
 *     }
 *     ... hm_detok_flush(d, &s, &len); hm_detok_free(d); free(ids); hm_tokenizer_free(tok);
 *
 * Ownership and threads: an hm_tokenizer is immutable after loading; every function taking a
 * `const hm_tokenizer *` may be called from several threads at once (encoding keeps its scratch
 * per call). Strings returned by accessors point into the tokenizer and live until
 * hm_tokenizer_free. An hm_detok (incremental decoder) is per-stream mutable state: one thread at
 * a time, and it must be freed before its tokenizer. On failure no output object is created
 * (*out is set to NULL) and hm_last_error() names the file and the field. */
#ifndef HM_TOKENIZER_TOKENIZER_H
#define HM_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "format/gguf.h"

typedef enum hm_tok_kind {
    HM_TOK_BPE = 0, /* byte-level BPE (GPT-2 byte alphabet in GGUF/HF, raw bytes in tiktoken) */
    HM_TOK_SPM,     /* SentencePiece BPE: score merges, "▁" for space, <0xXX> byte fallback */
    HM_TOK_WPM,     /* WordPiece (BERT) */
} hm_tok_kind;

/* Token attributes (llama.cpp's token types, from GGUF token_type / SentencePiece piece type). */
typedef enum hm_tok_type {
    HM_TOKT_NORMAL = 1,
    HM_TOKT_UNKNOWN = 2,
    HM_TOKT_CONTROL = 3,
    HM_TOKT_USER_DEFINED = 4,
    HM_TOKT_UNUSED = 5,
    HM_TOKT_BYTE = 6,
} hm_tok_type;

/* hm_tokenizer, HM_TOKEN_NONE and the encoding/decoding flags are public (hmoe.h). */

/* ---- loading ---------------------------------------------------------------------------------
 * hm_tokenizer_load detects the kind of PATH:
 *   - a directory: tokenizer.json when present, else vocab.json + merges.txt, else
 *     tokenizer.model; tokenizer_config.json / added_tokens.json / special_tokens_map.json add
 *     special tokens and add_bos_token;
 *   - a GGUF file (magic "GGUF"): the tokenizer.ggml.* keys;
 *   - a SentencePiece model (protobuf ModelProto);
 *   - a tiktoken rank file ("base64 rank" lines), optionally gzip-compressed (.tiktoken.gz).
 * On success *out owns everything it needs (no reference to the file is kept). */
hm_status hm_tokenizer_load(const char *path, hm_tokenizer **out);
/* From an open GGUF (model files): copies what it needs, g may be closed afterwards. */
hm_status hm_tokenizer_from_gguf(const hm_gguf *g, hm_tokenizer **out);
/* The same readers over memory (tests, fuzzing). name is used in error messages. */
hm_status hm_tokenizer_from_spm_memory(const void *data, size_t size, const char *name,
                                       hm_tokenizer **out);
hm_status hm_tokenizer_from_tiktoken_memory(const void *data, size_t size, const char *name,
                                            hm_tokenizer **out);
/* vocab_json: the text of vocab.json; merges_txt: merges.txt (may be NULL for no merges). */
hm_status hm_tokenizer_from_hf_memory(const char *vocab_json, size_t vocab_len,
                                      const char *merges_txt, size_t merges_len, const char *name,
                                      hm_tokenizer **out);
/* json: the text of a tokenizer.json (no tokenizer_config.json etc. are read). */
hm_status hm_tokenizer_from_json_memory(const char *json, size_t len, const char *name,
                                        hm_tokenizer **out);
void hm_tokenizer_free(hm_tokenizer *tok); /* NULL is a no-op */

/* ---- encoding --------------------------------------------------------------------------------
 * Encodes text[0..len) (any bytes; invalid UTF-8 is kept byte-exact through byte tokens).
 * hm_tokenizer_encode writes at most cap ids and always sets *n_out to the number the whole text
 * needs (so a too small buffer is detected by *n_out > cap; nothing is lost but the tail).
 * hm_tokenizer_encode_alloc returns a malloc'ed array (free() it), *ids NULL when n is 0. */
hm_status hm_tokenizer_encode(const hm_tokenizer *tok, const char *text, size_t len, unsigned flags,
                              int32_t *ids, size_t cap, size_t *n_out);
hm_status hm_tokenizer_encode_alloc(const hm_tokenizer *tok, const char *text, size_t len,
                                    unsigned flags, int32_t **ids, size_t *n_out);

/* ---- decoding --------------------------------------------------------------------------------
 * The bytes a token stands for (GPT-2 alphabet undone, "▁" -> " ", <0x41> -> "A"); control and
 * unknown tokens give "" unless HM_DETOK_SPECIAL. Pointer into the tokenizer; NULL (and an error)
 * when id is out of range. */
const char *hm_tokenizer_piece(const hm_tokenizer *tok, int32_t id, unsigned flags, size_t *len);
/* The token's text as stored in the vocabulary ("Ġthe", "▁the", "<0x0A>"), NUL-terminated. */
const char *hm_tokenizer_token_text(const hm_tokenizer *tok, int32_t id);
/* Whole-sequence decode into a malloc'ed, NUL-terminated buffer (*len excludes the NUL). Bytes
 * are exact (invalid UTF-8 is passed through). Ids out of range: HM_ERR_INVALID_ARG naming it. */
hm_status hm_tokenizer_decode(const hm_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                              char **text, size_t *len);

/* Incremental decoder: push ids one at a time; each call hands back the bytes that are now
 * complete UTF-8 (an incomplete multi-byte sequence at the end is held back until its last byte
 * arrives). A held sequence that turns out invalid is released as raw bytes (or as U+FFFD per
 * invalid byte with HM_DETOK_REPLACE_INVALID), so the concatenation of every chunk plus the flush
 * equals hm_tokenizer_decode of the same ids (in raw mode). Returned pointers stay valid until
 * the next call on d. */
hm_status hm_detok_new(const hm_tokenizer *tok, unsigned flags, hm_detok **out);
hm_status hm_detok_push(hm_detok *d, int32_t id, const char **text, size_t *len);
/* Releases whatever is held (end of stream) and resets d for a new stream. */
void hm_detok_flush(hm_detok *d, const char **text, size_t *len);
void hm_detok_free(hm_detok *d); /* NULL is a no-op */

/* ---- vocabulary ------------------------------------------------------------------------------ */
hm_tok_kind hm_tokenizer_kind(const hm_tokenizer *tok);
const char *hm_tokenizer_kind_name(const hm_tokenizer *tok); /* "bpe", "spm", "wpm" */
const char *hm_tokenizer_pre_name(const hm_tokenizer *tok);  /* "qwen2", "llama3", ... */
uint32_t hm_tokenizer_n_vocab(const hm_tokenizer *tok);
int32_t hm_tokenizer_bos(const hm_tokenizer *tok); /* HM_TOKEN_NONE when the model has none */
int32_t hm_tokenizer_eos(const hm_tokenizer *tok);
int32_t hm_tokenizer_eot(const hm_tokenizer *tok); /* end of turn (<|im_end|>, <|eot_id|>) */
int32_t hm_tokenizer_unk(const hm_tokenizer *tok);
int32_t hm_tokenizer_pad(const hm_tokenizer *tok);
/* The normalizer applied to text before pre-tokenization, its steps joined by '+' ("NFC",
 * "NFKD+Lowercase+Strip"); "" when there is none. */
const char *hm_tokenizer_normalizer(const hm_tokenizer *tok);
bool hm_tokenizer_add_bos(const hm_tokenizer *tok);
bool hm_tokenizer_add_eos(const hm_tokenizer *tok);
/* Token type; 0 for ids out of range. */
hm_tok_type hm_tokenizer_token_type(const hm_tokenizer *tok, int32_t id);
bool hm_tokenizer_is_control(const hm_tokenizer *tok, int32_t id);
/* control, unknown or user-defined: matched as a whole before pre-tokenization */
bool hm_tokenizer_is_special(const hm_tokenizer *tok, int32_t id);
/* end of generation: eos, eot, <|im_end|>, <|eot_id|>, <|return|>, ... */
bool hm_tokenizer_is_eog(const hm_tokenizer *tok, int32_t id);
/* id of an exact token text, HM_TOKEN_NONE when absent. */
int32_t hm_tokenizer_find(const hm_tokenizer *tok, const char *text, size_t len);

#endif
