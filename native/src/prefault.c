/* prefault.c - the suffix array's memory, faulted in while the corpus streams in.
 *
 * The first write to a fresh page costs a page fault and the kernel zeroing it (in a VM also
 * the host backing it): for the 800 MB suffix array of a 200M-token shard, 1.5-3 s on the test
 * machine, all of it on the critical path when SA-IS's first pass is what touches it. While
 * documents arrive, though, the build is bound by one thread (Python handing batches over) and
 * a second core is usually idle. So the writer reserves address space for the largest shard up
 * front and a background thread touches the pages the tokens so far will need; by the time the
 * shard is finished its suffix array is mostly resident. Memory is what the suffix array takes
 * anyway (4 bytes per token seen), only earlier. Everything here is an optimization: any
 * failure leaves the caller to allocate as before. */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise(), MAP_ANONYMOUS under -std=c99 */
#endif
#include "prefault.h"
#include "parallel.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#endif

#if defined(MAP_ANONYMOUS) && defined(MAP_NORESERVE)
#define IG_HAVE_PREFAULT 1
#endif
#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23 /* Linux >= 5.14; older kernels answer EINVAL */
#endif

struct ig_prefault {
    uint8_t *base;
    size_t reserved;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t want, done; /* bytes asked for / faulted in (guarded by mu) */
    int stop;
    int touch_ok;  /* may write a zero into a page to fault it in */
    int populate;  /* MADV_POPULATE_WRITE works (cleared on the first failure) */
};

enum { PAGE = 4096, STEP = 2 << 20 }; /* touch a page at a time, publish progress per 2 MiB */

#ifdef IG_HAVE_PREFAULT

/* Fault in bytes [a, b) of the buffer. */
static void fault_in(ig_prefault *p, size_t a, size_t b) {
#if defined(__linux__)
    if (p->populate) {
        size_t lo = a & ~(size_t)(PAGE - 1);
        if (madvise(p->base + lo, b - lo, MADV_POPULATE_WRITE) == 0) return;
        p->populate = 0;
    }
#endif
    if (p->touch_ok)
        for (size_t i = a; i < b; i += PAGE) ((volatile uint8_t *)p->base)[i] = 0;
}

static void *prefault_main(void *arg) {
    ig_prefault *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->done >= p->want) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        size_t from = p->done, to = p->want;
        pthread_mutex_unlock(&p->mu);
        for (size_t a = from; a < to;) {
            size_t b = to - a < STEP ? to : a + STEP;
            fault_in(p, a, b);
            a = b;
            if (__atomic_load_n(&p->stop, __ATOMIC_RELAXED)) break;
        }
        pthread_mutex_lock(&p->mu);
        p->done = to;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}
#endif

ig_prefault *ig_prefault_new(size_t max_bytes, int touch_ok) {
#ifdef IG_HAVE_PREFAULT
    if (max_bytes == 0) return NULL;
    ig_prefault *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    /* address space only: MAP_NORESERVE keeps it out of the overcommit accounting */
    void *m = mmap(NULL, max_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        free(p);
        return NULL;
    }
    p->base = m;
    p->reserved = max_bytes;
    p->touch_ok = touch_ok;
    p->populate = 1;
#if defined(MADV_HUGEPAGE)
    (void)madvise(m, max_bytes, MADV_HUGEPAGE); /* SA-IS writes it at random: spare the TLB */
#endif
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (ig_thread_start_quiet(&p->thread, prefault_main, p) != 0) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        munmap(m, max_bytes);
        free(p);
        return NULL;
    }
    return p;
#else
    (void)max_bytes;
    (void)touch_ok;
    return NULL;
#endif
}

void *ig_prefault_base(ig_prefault *p) { return p ? p->base : NULL; }

void ig_prefault_want(ig_prefault *p, size_t bytes) {
    if (!p) return;
    if (bytes > p->reserved) bytes = p->reserved;
    pthread_mutex_lock(&p->mu);
    if (bytes > p->want) {
        p->want = bytes;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

static void stop_thread(ig_prefault *p) {
    pthread_mutex_lock(&p->mu);
    if (p->stop) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
}

void *ig_prefault_take(ig_prefault *p, size_t bytes) {
    if (!p) return NULL;
    stop_thread(p);
    if (bytes > p->reserved) return NULL;
#if defined(__linux__) && defined(MADV_DONTNEED)
    /* pages faulted in ahead of need and never used go back: peak memory stays what the
       caller accounts for */
    size_t keep = (bytes + PAGE - 1) & ~(size_t)(PAGE - 1);
    if (p->done > keep) (void)madvise(p->base + keep, p->done - keep, MADV_DONTNEED);
#endif
    return p->base;
}

void ig_prefault_free(ig_prefault *p) {
    if (!p) return;
#ifdef IG_HAVE_PREFAULT
    stop_thread(p);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    munmap(p->base, p->reserved);
#endif
    free(p);
}
