/* async_write.c - a thread that writes queued byte ranges to a file.
 *
 * Streaming tokens.bin and sa.bin while the corpus arrives and while SA-IS finalizes ranges
 * lets the disk work early, but each pwrite is also a copy into the page cache (fresh pages):
 * about 2.5 s of the main thread for the 1.2 GB a 200M-token shard writes, measured with perf.
 * Handing the writes to a thread takes that copy off the build's critical path whenever a
 * core is free. Writes happen in the order they were queued; the first failure stops them and
 * is reported at the end (the caller then writes the file the slow way). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sync_file_range */
#endif
#include "async_write.h"
#include "parallel.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const void *src;
    size_t n;
    int64_t off;
    int pack;
} aw_job;

struct ig_awriter {
    int fd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    aw_job *jobs;
    size_t head, tail, cap; /* queue jobs[head, tail) (guarded by mu) */
    int closing, failed;
    uint8_t *packbuf;
};

enum { PACK_CHUNK = 1 << 18 }; /* int32 values packed per pwrite */

int ig_pwrite_all(int fd, const void *p, size_t n, int64_t off) {
    const uint8_t *b = p;
    while (n) {
        ssize_t k = pwrite(fd, b, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

static int run_job(ig_awriter *a, const aw_job *j) {
    int bad = 0;
    if (!j->pack) {
        bad = ig_pwrite_all(a->fd, j->src, j->n, j->off);
    } else {
        const int32_t *v = j->src;
        size_t m = j->n / 4, p = (size_t)j->pack;
        for (size_t s = 0; s < m && !bad; s += PACK_CHUNK) {
            size_t e = m - s < PACK_CHUNK ? m : s + PACK_CHUNK;
            for (size_t i = s; i < e; i++) {
                uint64_t x = (uint64_t)(uint32_t)v[i];
                memcpy(a->packbuf + (i - s) * p, &x, p);
            }
            bad = ig_pwrite_all(a->fd, a->packbuf, (e - s) * p, j->off + (int64_t)(s * p));
        }
    }
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    /* start writeback now: the final fsync then finds the disk's work done */
    if (!bad) (void)sync_file_range(a->fd, (off_t)j->off, (off_t)(j->pack ? j->n / 4 * (size_t)j->pack : j->n),
                                    SYNC_FILE_RANGE_WRITE);
#endif
    return bad;
}

static void *aw_main(void *arg) {
    ig_awriter *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->head == a->tail && !a->closing) pthread_cond_wait(&a->cv, &a->mu);
        if (a->head == a->tail) break; /* closing and drained */
        aw_job j = a->jobs[a->head];
        int failed = a->failed;
        pthread_mutex_unlock(&a->mu);
        int bad = failed ? 0 : run_job(a, &j); /* after a failure the rest are dropped */
        pthread_mutex_lock(&a->mu);
        a->head++;
        a->failed |= bad;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

ig_awriter *ig_aw_new(int fd) {
    ig_awriter *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->fd = fd;
    a->packbuf = malloc((size_t)PACK_CHUNK * 4);
    if (!a->packbuf) {
        free(a);
        return NULL;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (ig_thread_start_quiet(&a->thread, aw_main, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a->packbuf);
        free(a);
        return NULL;
    }
    return a;
}

int ig_aw_put(ig_awriter *a, const void *src, size_t n, int64_t off, int pack) {
    if (!a || pack < 0 || pack > 3 || (pack && n % 4)) return -1;
    if (n == 0) return 0;
    pthread_mutex_lock(&a->mu);
    int rc = -1;
    if (!a->failed) {
        if (a->head > 0 && a->head == a->tail) a->head = a->tail = 0; /* drained: reuse from the start */
        if (a->tail == a->cap) {
            size_t cap = a->cap ? 2 * a->cap : 64;
            aw_job *j = realloc(a->jobs, cap * sizeof *j); /* (the thread copies a job out under mu) */
            if (j) {
                a->jobs = j;
                a->cap = cap;
            }
        }
        if (a->tail < a->cap) {
            a->jobs[a->tail++] = (aw_job){src, n, off, pack};
            pthread_cond_signal(&a->cv);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int ig_aw_finish(ig_awriter *a) {
    if (!a) return -1;
    pthread_mutex_lock(&a->mu);
    a->closing = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    int failed = a->failed;
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->jobs);
    free(a->packbuf);
    free(a);
    return failed ? -1 : 0;
}
