/* status.h - error reporting with context: hm_errorf sets the thread's last error and returns it.
 */
#ifndef HM_CORE_STATUS_H
#define HM_CORE_STATUS_H

#include "hmoe.h"

#if defined(__GNUC__)
#define HM_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define HM_PRINTF(f, a)
#endif

/* Longest error message kept; longer ones are truncated with "...". */
#define HM_ERROR_MAX 1024

/* Formats a message into this thread's last-error buffer and returns st, so that library code can
 * write `return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s': expected %d dims, got %d", ...)`. */
hm_status hm_errorf(hm_status st, const char *fmt, ...) HM_PRINTF(2, 3);

/* Like hm_errorf, but appends ": <strerror(errnum)>". */
hm_status hm_errorf_errno(hm_status st, int errnum, const char *fmt, ...) HM_PRINTF(3, 4);

/* Prepends "prefix: " to the current message (adds context while an error travels up). */
hm_status hm_error_prefix(hm_status st, const char *fmt, ...) HM_PRINTF(2, 3);

void hm_error_clear(void);

#endif
