/* hmoe.h - public API of libhmoe: status codes and version (model/session API arrives with the
 * engine). */
#ifndef HMOE_H
#define HMOE_H

#ifdef __cplusplus
extern "C" {
#endif

#define HMOE_VERSION_MAJOR 0
#define HMOE_VERSION_MINOR 1
#define HMOE_VERSION_PATCH 0

/* Every library function that can fail returns an hm_status. HM_OK is 0; every other value is an
 * error class. The detailed message (file, field, expected value) of the most recent error on the
 * calling thread is available from hm_last_error(). */
typedef enum hm_status {
    HM_OK = 0,
    HM_ERR_INVALID_ARG, /* a caller passed a bad value (NULL, out of range, wrong shape) */
    HM_ERR_NO_MEMORY,   /* an allocation failed or a size computation overflowed */
    HM_ERR_IO,          /* open/read/mmap/stat failed (errno text is in the message) */
    HM_ERR_FORMAT,      /* a file or request is malformed, truncated or inconsistent */
    HM_ERR_UNSUPPORTED, /* valid input that this build or this machine cannot handle */
    HM_ERR_NOT_FOUND,   /* a named file, tensor, key or device does not exist */
    HM_ERR_SYSTEM,      /* an OS facility failed (threads, affinity, syscalls) */
    HM_ERR_DEVICE,      /* the GPU runtime reported an error */
    HM_ERR_INTERNAL,    /* a check of our own failed: a bug in hmoe */
    HM_ERR_NUMERIC,     /* a computation gave NaN or inf (NaN/inf in weights or inputs) */
    HM_STATUS_COUNT
} hm_status;

/* Short, static, human-readable name of a status ("invalid argument", ...). Never NULL. */
const char *hm_status_str(hm_status st);

/* Detailed message of the last error set on this thread ("" when none). Valid until the next
 * error on the same thread. */
const char *hm_last_error(void);

/* "0.1.0" */
const char *hm_version(void);

#ifdef __cplusplus
}
#endif
#endif /* HMOE_H */
