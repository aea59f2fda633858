/* log.c - levelled logging; one line per call, written with a single fputs so threads never
 * interleave. */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>

#include "core/timer.h"

static atomic_int g_level = HM_LOG_WARN;
static _Atomic(FILE *) g_stream = NULL;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

hm_status hm_log_parse_level(const char *s, hm_log_level *out) {
    static const struct {
        const char *name;
        hm_log_level level;
    } names[] = {{"debug", HM_LOG_DEBUG},  {"info", HM_LOG_INFO},   {"warn", HM_LOG_WARN},
                 {"warning", HM_LOG_WARN}, {"error", HM_LOG_ERROR}, {"off", HM_LOG_OFF},
                 {"none", HM_LOG_OFF}};
    if (!s) return hm_errorf(HM_ERR_INVALID_ARG, "log level: NULL string");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].level;
            return HM_OK;
        }
    }
    return hm_errorf(HM_ERR_INVALID_ARG,
                     "log level '%s' is not one of debug, info, warn, error, off", s);
}

const char *hm_log_level_name(hm_log_level level) {
    switch (level) {
    case HM_LOG_DEBUG:
        return "debug";
    case HM_LOG_INFO:
        return "info";
    case HM_LOG_WARN:
        return "warn";
    case HM_LOG_ERROR:
        return "error";
    case HM_LOG_OFF:
        return "off";
    }
    return "?";
}

void hm_log_init_from_env(void) {
    const char *env = getenv("HMOE_LOG");
    if (!env || !*env) return;
    hm_log_level level = HM_LOG_WARN; /* set by the parse (gcc 13 cannot tell) */
    if (hm_log_parse_level(env, &level) == HM_OK) {
        atomic_store(&g_level, level);
    } else {
        atomic_store(&g_level, HM_LOG_WARN);
        hm_log(HM_LOG_WARN, "HMOE_LOG: %s; using warn", hm_last_error());
    }
}

static void init_once(void) {
    hm_log_init_from_env();
}

void hm_log_set_level(hm_log_level level) {
    pthread_once(&g_once, init_once);
    atomic_store(&g_level, level);
}

hm_log_level hm_log_get_level(void) {
    pthread_once(&g_once, init_once);
    return (hm_log_level)atomic_load(&g_level);
}

void hm_log_set_stream(FILE *f) {
    atomic_store(&g_stream, f);
}

void hm_log(hm_log_level level, const char *fmt, ...) {
    pthread_once(&g_once, init_once);
    if ((int)level < atomic_load(&g_level) || level >= HM_LOG_OFF) return;
    static const char tag[] = {'D', 'I', 'W', 'E'};
    char line[2048];
    double t = (double)hm_time_ns() * 1e-9;
    int n = snprintf(line, sizeof line, "[hmoe %c %.6f] ", tag[level], t);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len] = '\n';
    line[len + 1] = '\0';
    FILE *f = atomic_load(&g_stream);
    fputs(line, f ? f : stderr);
}
