/* bench_writer.c - time one shard build (ig_writer) from a pre-tokenized .npy corpus.
 *
 *   gcc -O2 -std=c99 -D_GNU_SOURCE -pthread -Inative/include -Inative/src \
 *       native/tests/bench_writer.c native/src/*.c -lm -o /tmp/bench_writer
 *   /tmp/bench_writer TOKENS.npy OFFSETS.npy OUT_DIR [ntd_cache_min_cost]
 *
 * TOKENS.npy: u16 token ids (1-D); OFFSETS.npy: int64 document boundaries (n_docs + 1).
 * Prints wall and CPU seconds for adding the documents and for ig_writer_finish (SA-IS and
 * writing the files), so the C core can be profiled (perf record) without Python.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "infinigram.h"

static double now(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Map a .npy file; returns a pointer past its header. */
static const void *map_npy(const char *path, size_t *bytes) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) return NULL;
    const uint8_t *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return NULL;
    size_t hl = p[6] == 1 ? 10 + (size_t)(p[8] | p[9] << 8) : 12 + (size_t)(p[8] | p[9] << 8 | p[10] << 16);
    *bytes = (size_t)st.st_size - hl;
    return p + hl;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENS.npy OFFSETS.npy OUT_DIR [ntd_cache_min_cost]\n", argv[0]);
        return 2;
    }
    size_t tb, ob;
    const uint16_t *tok = map_npy(argv[1], &tb);
    const int64_t *off = map_npy(argv[2], &ob);
    if (!tok || !off) {
        perror("map");
        return 1;
    }
    int64_t n_docs = (int64_t)(ob / 8) - 1;
    char err[512];
    ig_writer *w;
    if (ig_writer_new(&w, argv[3], 2, 65535, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (argc > 4) ig_writer_set_ntd_cache(w, atoll(argv[4]));
    double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    enum { CHUNK = 1 << 22 };
    uint32_t *ids = malloc(CHUNK * sizeof(uint32_t) + 8);
    int64_t *o = malloc(((size_t)n_docs + 1) * sizeof(int64_t));
    for (int64_t d = 0; d < n_docs;) { /* batches of whole documents, as build.py sends them */
        int64_t e = d + 1, base = off[d];
        while (e < n_docs && off[e + 1] - base <= CHUNK) e++;
        int64_t len = off[e] - base;
        uint32_t *buf = len <= CHUNK ? ids : malloc((size_t)len * sizeof(uint32_t));
        for (int64_t i = 0; i < len; i++) buf[i] = tok[base + i];
        for (int64_t k = d; k <= e; k++) o[k - d] = off[k] - base;
        if (ig_writer_add_docs(w, buf, o, e - d, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        if (buf != ids) free(buf);
        d = e;
    }
    double t1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_PROCESS_CPUTIME_ID);
    int rc = ig_writer_finish(w, err, sizeof err);
    double t2 = now(CLOCK_MONOTONIC), c2 = now(CLOCK_PROCESS_CPUTIME_ID);
    if (rc) fprintf(stderr, "%s\n", err);
    printf("tokens %lld docs %lld: add %.2f s (cpu %.2f), finish %.2f s (cpu %.2f), total %.2f s\n",
           (long long)ig_writer_total_len(w), (long long)n_docs, t1 - t0, c1 - c0, t2 - t1, c2 - c1, t2 - t0);
    ig_writer_free(w);
    free(ids);
    free(o);
    return rc != 0;
}
