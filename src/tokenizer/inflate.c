/* inflate.c - gzip (RFC 1952) / DEFLATE (RFC 1951) decompression for .tiktoken.gz rank files.
 * A small bit-at-a-time decoder: the files are a few MB and read once at load time, so speed does
 * not matter and we avoid a zlib dependency (see docs/tokenizers.md). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

#define MAX_BITS 15
#define MAX_OUT  (512u << 20) /* refuse to inflate beyond 512 MiB (decompression bombs) */

typedef struct inf {
    const uint8_t *in;
    size_t n_in, pos;
    uint32_t bitbuf, bitcnt;
    hm_tbuf *out;
    bool err;
} inf;

typedef struct huff {
    uint16_t count[MAX_BITS + 1];
    uint16_t symbol[320];
} huff;

static uint32_t bits(inf *s, uint32_t need) {
    while (s->bitcnt < need) {
        if (s->pos >= s->n_in) {
            s->err = true;
            return 0;
        }
        s->bitbuf |= (uint32_t)s->in[s->pos++] << s->bitcnt;
        s->bitcnt += 8;
    }
    uint32_t v = s->bitbuf & ((1u << need) - 1);
    s->bitbuf >>= need;
    s->bitcnt -= need;
    return v;
}

/* Builds canonical Huffman tables; false when the lengths are over-subscribed. */
static bool build(huff *h, const uint8_t *len, int n) {
    memset(h->count, 0, sizeof h->count);
    for (int i = 0; i < n; i++) h->count[len[i]]++;
    int left = 1;
    for (int l = 1; l <= MAX_BITS; l++) {
        left <<= 1;
        left -= h->count[l];
        if (left < 0) return false;
    }
    uint16_t offs[MAX_BITS + 1];
    offs[1] = 0;
    for (int l = 1; l < MAX_BITS; l++) offs[l + 1] = (uint16_t)(offs[l] + h->count[l]);
    for (int i = 0; i < n; i++)
        if (len[i]) h->symbol[offs[len[i]]++] = (uint16_t)i;
    return true;
}

static int decode(inf *s, const huff *h) {
    int code = 0, first = 0, index = 0;
    for (int l = 1; l <= MAX_BITS; l++) {
        code |= (int)bits(s, 1);
        if (s->err) return -1;
        int count = h->count[l];
        if (code - count < first) return h->symbol[index + (code - first)];
        index += count;
        first += count;
        first <<= 1;
        code <<= 1;
    }
    return -1;
}

static const uint16_t LBASE[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                   31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t LEXT[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t DBASE[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                   33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                   1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t DEXT[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static bool codes(inf *s, const huff *lc, const huff *dc) {
    for (;;) {
        int sym = decode(s, lc);
        if (sym < 0) return false;
        if (sym < 256) {
            uint8_t c = (uint8_t)sym;
            if (s->out->n >= MAX_OUT || hm_tbuf_put(s->out, &c, 1) != HM_OK) return false;
            continue;
        }
        if (sym == 256) return true;
        sym -= 257;
        if (sym >= 29) return false;
        size_t len = LBASE[sym] + bits(s, LEXT[sym]);
        int ds = decode(s, dc);
        if (ds < 0 || ds >= 30) return false;
        size_t dist = DBASE[ds] + bits(s, DEXT[ds]);
        if (s->err || dist > s->out->n || s->out->n + len > MAX_OUT) return false;
        if (hm_tbuf_put(s->out, NULL, 0) != HM_OK) return false;
        for (size_t i = 0; i < len; i++) { /* byte by byte: the copy may overlap itself */
            uint8_t c = (uint8_t)s->out->p[s->out->n - dist];
            if (hm_tbuf_put(s->out, &c, 1) != HM_OK) return false;
        }
    }
}

static bool stored(inf *s) {
    s->bitbuf = 0;
    s->bitcnt = 0;
    if (s->n_in - s->pos < 4) return false;
    const uint8_t *p = s->in + s->pos;
    unsigned len = p[0] | (p[1] << 8), nlen = p[2] | (p[3] << 8);
    if (len != (~nlen & 0xFFFF)) return false;
    s->pos += 4;
    if (s->n_in - s->pos < len || s->out->n + len > MAX_OUT) return false;
    if (hm_tbuf_put(s->out, s->in + s->pos, len) != HM_OK) return false;
    s->pos += len;
    return true;
}

static bool fixed(inf *s) {
    static huff lc, dc;
    static int ready; /* benign race: identical content */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        uint8_t len[320];
        int i = 0;
        for (; i < 144; i++) len[i] = 8;
        for (; i < 256; i++) len[i] = 9;
        for (; i < 280; i++) len[i] = 7;
        for (; i < 288; i++) len[i] = 8;
        huff a, b;
        build(&a, len, 288);
        for (i = 0; i < 30; i++) len[i] = 5;
        build(&b, len, 30);
        lc = a;
        dc = b;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return codes(s, &lc, &dc);
}

static bool dynamic(inf *s) {
    static const uint8_t ORDER[19] = {16, 17, 18, 0, 8,  7, 9,  6, 10, 5,
                                      11, 4,  12, 3, 13, 2, 14, 1, 15};
    uint8_t len[320];
    int nlen = (int)bits(s, 5) + 257, ndist = (int)bits(s, 5) + 1, ncode = (int)bits(s, 4) + 4;
    if (s->err || nlen > 286 || ndist > 30) return false;
    memset(len, 0, sizeof len);
    for (int i = 0; i < ncode; i++) len[ORDER[i]] = (uint8_t)bits(s, 3);
    huff lc, dc;
    if (s->err || !build(&lc, len, 19)) return false;
    int i = 0;
    while (i < nlen + ndist) {
        int sym = decode(s, &lc);
        if (sym < 0) return false;
        if (sym < 16) {
            len[i++] = (uint8_t)sym;
            continue;
        }
        uint8_t v = 0;
        int rep;
        if (sym == 16) {
            if (i == 0) return false;
            v = len[i - 1];
            rep = 3 + (int)bits(s, 2);
        } else if (sym == 17) {
            rep = 3 + (int)bits(s, 3);
        } else {
            rep = 11 + (int)bits(s, 7);
        }
        if (s->err || i + rep > nlen + ndist) return false;
        while (rep--) len[i++] = v;
    }
    if (len[256] == 0) return false;
    if (!build(&lc, len, nlen) || !build(&dc, len + nlen, ndist)) return false;
    return codes(s, &lc, &dc);
}

static uint32_t crc32_bytes(const uint8_t *p, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        uint32_t tmp[256];
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            tmp[i] = c;
        }
        memcpy(table, tmp, sizeof table);
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

hm_status hm_tok_gunzip(const uint8_t *in, size_t n, const char *name, hm_tbuf *out);
hm_status hm_tok_gunzip(const uint8_t *in, size_t n, const char *name, hm_tbuf *out) {
    out->n = 0;
    if (n < 18 || in[0] != 0x1F || in[1] != 0x8B || in[2] != 8)
        return hm_errorf(HM_ERR_FORMAT, "%s: not a gzip (deflate) file", name);
    uint8_t flg = in[3];
    size_t pos = 10;
    if (flg & 4) {
        if (pos + 2 > n) goto trunc;
        pos += 2 + (in[pos] | (in[pos + 1] << 8));
    }
    for (int z = 0; z < 2; z++)
        if (flg & (8 << z)) {
            while (pos < n && in[pos]) pos++;
            pos++;
        }
    if (flg & 2) pos += 2;
    if (pos >= n) goto trunc;
    inf s = {in, n, pos, 0, 0, out, false};
    hm_status st = hm_tbuf_put(out, NULL, 0);
    if (st) return st;
    int last;
    do {
        last = (int)bits(&s, 1);
        int type = (int)bits(&s, 2);
        bool ok = !s.err && (type == 0   ? stored(&s)
                             : type == 1 ? fixed(&s)
                                         : type == 2 && dynamic(&s));
        if (!ok || s.err)
            return hm_errorf(HM_ERR_FORMAT, "%s: corrupt or truncated deflate data near byte %zu",
                             name, s.pos);
    } while (!last);
    if (s.n_in - s.pos < 8) goto trunc;
    const uint8_t *tr = in + s.pos;
    uint32_t crc = tr[0] | (tr[1] << 8) | (tr[2] << 16) | ((uint32_t)tr[3] << 24);
    uint32_t isize = tr[4] | (tr[5] << 8) | (tr[6] << 16) | ((uint32_t)tr[7] << 24);
    if (isize != (uint32_t)out->n || crc != crc32_bytes((const uint8_t *)out->p, out->n))
        return hm_errorf(HM_ERR_FORMAT, "%s: gzip CRC/size mismatch", name);
    return HM_OK;
trunc:
    return hm_errorf(HM_ERR_FORMAT, "%s: truncated gzip file", name);
}
