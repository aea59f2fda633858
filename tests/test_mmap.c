/* test_mmap.c - file mapping: contents equal read(2), empty files, errors name the path. */
#include <stdint.h>
#include <fcntl.h>
#include <unistd.h>

#include "core/mmap.h"
#include "test.h"

int main(void) {
    char path[] = "/tmp/hmoe_mmap_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    size_t n = 3 * 4096 + 123;
    unsigned char *buf = malloc(n);
    uint32_t s = 1;
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)((s = s * 1664525u + 1013904223u) >> 24);
    CHECK(write(fd, buf, n) == (ssize_t)n);
    close(fd);

    hm_map_params p = hm_map_default_params();
    for (int adv = HM_MAP_NORMAL; adv <= HM_MAP_HUGEPAGE; adv++) {
        p.advice = (hm_map_advice)adv;
        p.populate = adv % 2;
        hm_mapped_file f;
        CHECK_OK(hm_file_map(path, &p, &f));
        CHECK(f.size == n);
        CHECK(f.data && memcmp(f.data, buf, n) == 0);
        CHECK(strcmp(f.path, path) == 0);
        CHECK_OK(hm_file_advise(&f, 100, 5000, HM_MAP_WILLNEED));
        CHECK_OK(hm_file_advise(&f, 0, n, HM_MAP_RANDOM));
        CHECK_STATUS(hm_file_advise(&f, n - 10, 11, HM_MAP_RANDOM), HM_ERR_INVALID_ARG);
        CHECK_CONTAINS(hm_last_error(), path);
        hm_file_unmap(&f);
        CHECK(f.data == NULL && f.size == 0);
        hm_file_unmap(&f);
    }

    /* empty file */
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    hm_mapped_file e;
    CHECK_OK(hm_file_map(path, NULL, &e));
    CHECK(e.size == 0 && e.data == NULL);
    hm_file_unmap(&e);
    unlink(path);

    CHECK_STATUS(hm_file_map("/nonexistent/model.gguf", NULL, &e), HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "/nonexistent/model.gguf: cannot open");
    CHECK(e.data == NULL && e.path == NULL);
    CHECK_STATUS(hm_file_map("/tmp", NULL, &e), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "/tmp: not a regular file");
    CHECK_STATUS(hm_file_map(NULL, NULL, &e), HM_ERR_INVALID_ARG);
    free(buf);
    return test_done("mmap");
}
