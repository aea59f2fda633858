/* test_status.c - status names and per-thread error messages. */
#include <pthread.h>

#include "core/status.h"
#include "test.h"

static void *other_thread(void *arg) {
    (void)arg;
    CHECK(strcmp(hm_last_error(), "") == 0); /* fresh thread: no message */
    hm_errorf(HM_ERR_IO, "thread-local %d", 7);
    CHECK(strcmp(hm_last_error(), "thread-local 7") == 0);
    return NULL;
}

int main(void) {
    /* every status has a distinct, non-empty name */
    for (int i = 0; i < HM_STATUS_COUNT; i++) {
        const char *a = hm_status_str((hm_status)i);
        CHECK(a && *a && strcmp(a, "unknown status") != 0);
        for (int j = 0; j < i; j++) CHECK(strcmp(a, hm_status_str((hm_status)j)) != 0);
    }
    CHECK(strcmp(hm_status_str((hm_status)999), "unknown status") == 0);
    CHECK(HM_OK == 0);

    CHECK(hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s': expected %d dims, got %d", "m.gguf", "blk.0",
                    2, 3) == HM_ERR_FORMAT);
    CHECK(strcmp(hm_last_error(), "m.gguf: tensor 'blk.0': expected 2 dims, got 3") == 0);

    CHECK(hm_error_prefix(HM_ERR_FORMAT, "loading %s", "x") == HM_ERR_FORMAT);
    CHECK(strcmp(hm_last_error(), "loading x: m.gguf: tensor 'blk.0': expected 2 dims, got 3") ==
          0);

    CHECK(hm_errorf_errno(HM_ERR_IO, 2, "open %s", "/nope") == HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "open /nope: ");
    CHECK_CONTAINS(hm_last_error(), "No such file");

    /* long messages are truncated, terminated, and marked */
    char big[4000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    hm_errorf(HM_ERR_INTERNAL, "%s", big);
    CHECK(strlen(hm_last_error()) == HM_ERROR_MAX - 1);
    CHECK(strcmp(hm_last_error() + HM_ERROR_MAX - 4, "...") == 0);
    hm_error_prefix(HM_ERR_INTERNAL, "ctx");
    CHECK(strncmp(hm_last_error(), "ctx: xxx", 8) == 0);
    CHECK(strlen(hm_last_error()) == HM_ERROR_MAX - 1);

    hm_errorf(HM_ERR_IO, "main thread");
    pthread_t th;
    pthread_create(&th, NULL, other_thread, NULL);
    pthread_join(th, NULL);
    CHECK(strcmp(hm_last_error(), "main thread") == 0);
    hm_error_clear();
    CHECK(strcmp(hm_last_error(), "") == 0);
    CHECK(strcmp(hm_version(), "0.1.0") == 0);
    return test_done("status");
}
