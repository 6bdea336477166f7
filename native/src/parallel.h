/* parallel.h - a minimal parallel-for over pthreads (internal). */
#ifndef IG_PARALLEL_H
#define IG_PARALLEL_H

#include <pthread.h>
#include <stdint.h>

#define IG_MAX_THREADS 256

/* Process items [begin, end) as worker `tid` (0 .. n_threads-1); nonzero stops the loop. */
typedef int (*ig_work_fn)(void *ctx, int tid, int64_t begin, int64_t end);

int ig_cpu_count(void);
/* Threads for n_items: requested 0 = auto (CPUs, at most one per min_items_per_thread items),
   1 = none, k = min(k, n_items). */
int ig_resolve_threads(int requested, int64_t n_items, int64_t min_items_per_thread);
/* Run fn over [0, n_items) in chunks; the calling thread is worker 0. Returns the first
   nonzero code a worker returned (0 when all succeeded). */
int ig_parallel_for(int64_t n_items, int n_threads, int64_t chunk, ig_work_fn fn, void *ctx);

/* pthread_create for a background thread that takes no signals (SIGINT and friends stay with
   the caller's threads, i.e. Python's main thread). 0 or an errno value. */
int ig_thread_start_quiet(pthread_t *thread, void *(*fn)(void *), void *arg);

#endif
