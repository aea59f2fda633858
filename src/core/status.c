/* status.c - status names and the per-thread last-error message. */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char tls_error[HM_ERROR_MAX];

const char *hm_status_str(hm_status st) {
    switch (st) {
    case HM_OK:
        return "ok";
    case HM_ERR_INVALID_ARG:
        return "invalid argument";
    case HM_ERR_NO_MEMORY:
        return "out of memory";
    case HM_ERR_IO:
        return "i/o error";
    case HM_ERR_FORMAT:
        return "malformed input";
    case HM_ERR_UNSUPPORTED:
        return "unsupported";
    case HM_ERR_NOT_FOUND:
        return "not found";
    case HM_ERR_SYSTEM:
        return "system error";
    case HM_ERR_DEVICE:
        return "gpu error";
    case HM_ERR_INTERNAL:
        return "internal error";
    case HM_ERR_NUMERIC:
        return "not a number";
    case HM_STATUS_COUNT:
        break;
    }
    return "unknown status";
}

const char *hm_last_error(void) {
    return tls_error;
}

const char *hm_version(void) {
    return "0.1.0";
}

void hm_error_clear(void) {
    tls_error[0] = '\0';
}

static void mark_truncated(int n) {
    if (n >= HM_ERROR_MAX) memcpy(tls_error + HM_ERROR_MAX - 4, "...", 4);
}

hm_status hm_errorf(hm_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tls_error, sizeof tls_error, fmt, ap);
    va_end(ap);
    mark_truncated(n);
    return st;
}

hm_status hm_errorf_errno(hm_status st, int errnum, const char *fmt, ...) {
    char msg[HM_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char ebuf[128];
    const char *etext = strerror_r(errnum, ebuf, sizeof ebuf);
    int n = snprintf(tls_error, sizeof tls_error, "%s: %s", msg, etext);
    mark_truncated(n);
    return st;
}

hm_status hm_error_prefix(hm_status st, const char *fmt, ...) {
    char prefix[HM_ERROR_MAX], old[HM_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tls_error, sizeof old);
    int n = snprintf(tls_error, sizeof tls_error, "%s: %s", prefix, old);
    mark_truncated(n);
    return st;
}
