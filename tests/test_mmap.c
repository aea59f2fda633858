/* test_mmap.c - file mapping: contents equal read(2), empty files, errors name the path; user
 * files (core/file.h): FIFOs never block, output files replace only regular files, follow
 * symlinks, write devices and FIFOs in place. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mmap.h"
#include "test.h"

static void put_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* the file at path holds exactly text */
static bool holds(const char *path, const char *text) {
    size_t n = 0;
    char *got = test_read_file(path, &n);
    bool ok = got && n == strlen(text) && !memcmp(got, text, n);
    free(got);
    return ok;
}

/* hm_outfile_open + text + commit; returns the commit's (or the open's) status */
static hm_status put(const char *path, const char *text) {
    hm_outfile o;
    hm_status st = hm_outfile_open(path, &o);
    if (!st) {
        fputs(text, o.f);
        st = hm_outfile_commit(&o);
    }
    hm_outfile_close(&o);
    return st;
}

static void test_inputs(const char *dir) {
    char fifo[512], reg[512];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(reg, sizeof reg, "%s/in.txt", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    hm_mapped_file m;
    /* a FIFO with no writer: refused at once, naming it (a plain open would wait for a writer) */
    CHECK_STATUS(hm_file_map(fifo, NULL, &m), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "/fifo: not a regular file (a FIFO)");
    int fd;
    CHECK_STATUS(hm_file_open_regular(fifo, &fd, NULL), HM_ERR_IO);
    CHECK(fd == -1);
    CHECK_STATUS(hm_file_open_regular("/dev/null", &fd, NULL), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "/dev/null: not a regular file (a character device)");
    char *text;
    size_t len;
    CHECK_STATUS(hm_file_read_all(fifo, 100, false, &text, &len), HM_ERR_IO);
    CHECK(text == NULL);
    /* as a stream: read as it is (no writer: empty), without waiting */
    CHECK_OK(hm_file_read_all(fifo, 100, true, &text, &len));
    CHECK(text && len == 0 && text[0] == '\0');
    free(text);
    put_text(reg, "0123456789");
    CHECK_OK(hm_file_read_all(reg, 10, false, &text, &len));
    CHECK(text && len == 10 && !strcmp(text, "0123456789"));
    free(text);
    CHECK_STATUS(hm_file_read_all(reg, 9, false, &text, &len), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "/in.txt: 10 bytes is more than the 9 this file may have");
    CHECK_STATUS(hm_file_read_all("/nonexistent/x", 9, true, &text, &len), HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "/nonexistent/x: cannot open");
    unlink(reg);
    unlink(fifo);
}

static void test_outfiles(const char *dir) {
    char path[512], part[512], link[512], dangling[512], fifo[512], desc[1400];
    struct stat sb;
    snprintf(path, sizeof path, "%s/out.bin", dir);
    snprintf(part, sizeof part, "%s/out.bin.part", dir);
    snprintf(link, sizeof link, "%s/link.bin", dir);
    snprintf(dangling, sizeof dangling, "%s/dangling.bin", dir);
    snprintf(fifo, sizeof fifo, "%s/out.fifo", dir);

    /* a new file, then an existing one replaced whole, keeping its permission bits */
    CHECK_OK(put(path, "one"));
    CHECK(holds(path, "one") && access(part, F_OK) != 0);
    CHECK(chmod(path, 0640) == 0);
    CHECK_OK(put(path, "two"));
    CHECK(holds(path, "two") && stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640);
    /* not committed: the old file stays, the temporary goes */
    hm_outfile o;
    CHECK_OK(hm_outfile_open(path, &o));
    CHECK(o.tmp && !strcmp(o.tmp, part) && !o.in_place && !strcmp(hm_outfile_name(&o), part));
    fputs("cut", o.f);
    hm_outfile_close(&o);
    CHECK(holds(path, "two") && access(part, F_OK) != 0);
    hm_outfile_close(&o); /* zeroed: a no-op */

    /* a symlink: its target is written (the temporary next to the target) and the link kept */
    CHECK(symlink(path, link) == 0);
    CHECK_OK(put(link, "three"));
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(holds(path, "three"));
    hm_outfile_describe(link, desc, sizeof desc);
    CHECK_CONTAINS(desc, "/out.bin (through the symlink ");
    CHECK_CONTAINS(desc, "/link.bin)");
    /* a dangling symlink: refused, nothing created */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing.bin", dir);
    CHECK(symlink(missing, dangling) == 0);
    CHECK_STATUS(put(dangling, "x"), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "/dangling.bin: a symlink to a missing file");
    CHECK(access(missing, F_OK) != 0);

    /* a symlink or FIFO in the temporary's place is refused, not followed or waited on */
    CHECK(symlink(missing, part) == 0);
    CHECK_STATUS(put(path, "x"), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "out.bin.part: a symlink is in the way");
    CHECK(access(missing, F_OK) != 0 && holds(path, "three"));
    unlink(part);

    /* devices: written in place, never replaced; /dev/full's ENOSPC is the commit's error */
    CHECK_OK(put("/dev/null", "nothing"));
    CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    hm_outfile_describe("/dev/null", desc, sizeof desc);
    CHECK(!strcmp(desc, "/dev/null (a character device, written in place)"));
    CHECK_STATUS(put("/dev/full", "nothing"), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "/dev/full: write failed: No space left on device");
    CHECK(stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode));

    /* a FIFO: refused at once with no reader; written in place with one */
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_STATUS(put(fifo, "x"), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "/out.fifo: a FIFO with no reader");
    int rd = open(fifo, O_RDONLY | O_NONBLOCK);
    CHECK(rd >= 0);
    CHECK_OK(put(fifo, "through the fifo"));
    char buf[64] = {0};
    CHECK(read(rd, buf, sizeof buf - 1) == 16 && !strcmp(buf, "through the fifo"));
    close(rd);
    CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));

    /* a directory: refused */
    CHECK_STATUS(put(dir, "x"), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), ": a directory, not a file, character device or FIFO");
    CHECK_STATUS(hm_outfile_open("", &o), HM_ERR_INVALID_ARG);

    unlink(fifo);
    unlink(dangling);
    unlink(link);
    unlink(path);
}

int main(void) {
    alarm(60); /* a blocking open fails the test instead of hanging it */
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/hmoe_files_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    test_inputs(dir);
    test_outfiles(dir);
    rmdir(dir);

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
    CHECK_CONTAINS(hm_last_error(), "/tmp: not a regular file (a directory)");
    CHECK_STATUS(hm_file_map(NULL, NULL, &e), HM_ERR_INVALID_ARG);
    free(buf);
    return test_done("mmap");
}
