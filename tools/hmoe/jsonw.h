/* jsonw.h - a small streaming JSON writer for --json outputs (escapes strings, no allocation). */
#ifndef HMOE_TOOL_JSONW_H
#define HMOE_TOOL_JSONW_H

#include <stdbool.h>
#include <stdio.h>

typedef struct jw {
    FILE *f;
    int depth;
    bool need_comma[64];
} jw;

void jw_init(jw *w, FILE *f);
/* key is NULL for array elements and the top-level value. */
void jw_obj_begin(jw *w, const char *key);
void jw_obj_end(jw *w);
void jw_arr_begin(jw *w, const char *key);
void jw_arr_end(jw *w);
void jw_str(jw *w, const char *key, const char *v);
void jw_int(jw *w, const char *key, long long v);
void jw_num(jw *w, const char *key, double v); /* non-finite values are written as null */
void jw_bool(jw *w, const char *key, bool v);
void jw_null(jw *w, const char *key);

#endif
