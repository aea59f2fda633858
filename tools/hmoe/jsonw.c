/* jsonw.c - streaming JSON writer. */
#include "jsonw.h"

#include <math.h>

void jw_init(jw *w, FILE *f) {
    w->f = f;
    w->depth = 0;
    w->need_comma[0] = false;
}

static void write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void prefix(jw *w, const char *key) {
    if (w->need_comma[w->depth]) fputc(',', w->f);
    w->need_comma[w->depth] = true;
    if (w->depth > 0) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
    }
    if (key) {
        write_string(w->f, key);
        fputs(": ", w->f);
    }
}

static void open_(jw *w, const char *key, char c) {
    prefix(w, key);
    fputc(c, w->f);
    if (w->depth < 63) w->depth++;
    w->need_comma[w->depth] = false;
}

static void close_(jw *w, char c) {
    bool had = w->need_comma[w->depth];
    if (w->depth > 0) w->depth--;
    if (had) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
    }
    fputc(c, w->f);
    if (w->depth == 0) fputc('\n', w->f);
}

void jw_obj_begin(jw *w, const char *key) {
    open_(w, key, '{');
}
void jw_obj_end(jw *w) {
    close_(w, '}');
}
void jw_arr_begin(jw *w, const char *key) {
    open_(w, key, '[');
}
void jw_arr_end(jw *w) {
    close_(w, ']');
}

void jw_str(jw *w, const char *key, const char *v) {
    prefix(w, key);
    if (v)
        write_string(w->f, v);
    else
        fputs("null", w->f);
}

void jw_int(jw *w, const char *key, long long v) {
    prefix(w, key);
    fprintf(w->f, "%lld", v);
}

void jw_num(jw *w, const char *key, double v) {
    prefix(w, key);
    if (isfinite(v))
        fprintf(w->f, "%.6g", v);
    else
        fputs("null", w->f);
}

void jw_bool(jw *w, const char *key, bool v) {
    prefix(w, key);
    fputs(v ? "true" : "false", w->f);
}

void jw_null(jw *w, const char *key) {
    prefix(w, key);
    fputs("null", w->f);
}
