/* test_log.c - level parsing, HMOE_LOG, filtering, line format. */
#include <pthread.h>
#include <stdlib.h>

#include "core/log.h"
#include "test.h"

static char *slurp(FILE *f) {
    fflush(f);
    long n = ftell(f);
    char *s = calloc(1, (size_t)n + 1);
    rewind(f);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
    return s;
}

static void *log_many(void *arg) {
    for (int i = 0; i < 200; i++) HM_WARN("thread %ld line %d", (long)(size_t)arg, i);
    return NULL;
}

int main(void) {
    hm_log_level l;
    CHECK_OK(hm_log_parse_level("debug", &l));
    CHECK(l == HM_LOG_DEBUG);
    CHECK_OK(hm_log_parse_level("INFO", &l));
    CHECK(l == HM_LOG_INFO);
    CHECK_OK(hm_log_parse_level("warning", &l));
    CHECK(l == HM_LOG_WARN);
    CHECK_OK(hm_log_parse_level("Error", &l));
    CHECK(l == HM_LOG_ERROR);
    CHECK_OK(hm_log_parse_level("off", &l));
    CHECK(l == HM_LOG_OFF);
    CHECK_STATUS(hm_log_parse_level("verbose", &l), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "'verbose'");
    CHECK_CONTAINS(hm_last_error(), "debug, info, warn, error, off");

    FILE *f = tmpfile();
    hm_log_set_stream(f);

    setenv("HMOE_LOG", "error", 1);
    hm_log_init_from_env();
    CHECK(hm_log_get_level() == HM_LOG_ERROR);
    HM_WARN("hidden warning");
    HM_ERROR("shown error %d", 42);

    setenv("HMOE_LOG", "debug", 1);
    hm_log_init_from_env();
    HM_DEBUG("debug line");

    setenv("HMOE_LOG", "loud", 1);
    hm_log_init_from_env(); /* invalid: falls back to warn and says so */
    CHECK(hm_log_get_level() == HM_LOG_WARN);
    HM_INFO("hidden info");

    char *out = slurp(f);
    CHECK(strstr(out, "hidden") == NULL);
    CHECK_CONTAINS(out, "E ");
    CHECK_CONTAINS(out, "] shown error 42\n");
    CHECK_CONTAINS(out, "] debug line\n");
    CHECK_CONTAINS(out, "HMOE_LOG: log level 'loud' is not one of");
    CHECK(strncmp(out, "[hmoe E ", 8) == 0);
    free(out);

    /* concurrent writers never interleave within a line */
    FILE *g = tmpfile();
    hm_log_set_stream(g);
    pthread_t th[4];
    for (long i = 0; i < 4; i++) pthread_create(&th[i], NULL, log_many, (void *)i);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    out = slurp(g);
    int lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        lines++;
        CHECK_MSG(strncmp(line, "[hmoe W ", 8) == 0 && strstr(line, "] thread ") != NULL,
                  "bad line '%s'", line);
    }
    CHECK(lines == 800);
    free(out);
    hm_log_set_stream(NULL);
    fclose(f);
    fclose(g);
    return test_done("log");
}
