/* parallel.c - run a loop over items on a few threads (pthreads), items handed out in chunks
   by an atomic counter so that uneven items (a 1-token context next to a long one) balance. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__linux__)
#include <sched.h>
#endif

#include "parallel.h"

int ig_cpu_count(void) {
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int ig_resolve_threads(int requested, int64_t n_items, int64_t min_items_per_thread) {
    int64_t t;
    if (requested == 1 || n_items <= 1) return 1;
    if (requested <= 0) {
        t = ig_cpu_count();
        int64_t by_work = n_items / (min_items_per_thread > 0 ? min_items_per_thread : 1);
        if (by_work < t) t = by_work;
    } else {
        t = requested;
    }
    if (t > n_items) t = n_items;
    if (t > IG_MAX_THREADS) t = IG_MAX_THREADS;
    return t < 1 ? 1 : (int)t;
}

typedef struct {
    ig_work_fn fn;
    void *ctx;
    int64_t n_items, chunk;
    int64_t next; /* atomic */
    int rc;       /* atomic: first error */
} pool;

typedef struct {
    pool *p;
    int tid;
} worker_arg;

static void work_loop(pool *p, int tid) {
    for (;;) {
        if (__atomic_load_n(&p->rc, __ATOMIC_RELAXED)) return;
        int64_t begin = __atomic_fetch_add(&p->next, p->chunk, __ATOMIC_RELAXED);
        if (begin >= p->n_items) return;
        int64_t end = begin + p->chunk < p->n_items ? begin + p->chunk : p->n_items;
        int rc = p->fn(p->ctx, tid, begin, end);
        if (rc) {
            int zero = 0;
            __atomic_compare_exchange_n(&p->rc, &zero, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
            return;
        }
    }
}

static void *worker(void *arg) {
    worker_arg *a = arg;
    work_loop(a->p, a->tid);
    return NULL;
}

int ig_parallel_for(int64_t n_items, int n_threads, int64_t chunk, ig_work_fn fn, void *ctx) {
    if (n_items <= 0) return 0;
    if (chunk < 1) chunk = 1;
    pool p = {fn, ctx, n_items, chunk, 0, 0};
    if (n_threads <= 1) {
        work_loop(&p, 0);
        return p.rc;
    }
    pthread_t th[IG_MAX_THREADS];
    worker_arg args[IG_MAX_THREADS];
    int started = 0;
    for (int t = 1; t < n_threads; t++) { /* the calling thread is worker 0 */
        args[t].p = &p;
        args[t].tid = t;
        if (pthread_create(&th[t], NULL, worker, &args[t]) != 0) break; /* fewer threads is fine */
        started = t;
    }
    work_loop(&p, 0);
    for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
    return p.rc;
}

int ig_thread_start_quiet(pthread_t *thread, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits this mask */
    int rc = pthread_create(thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
