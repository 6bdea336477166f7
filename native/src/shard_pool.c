/* shard_pool.c - a step of a query on every shard at once while the index is cold (see
   shard_pool.h). Workers sleep on a futex (Linux; elsewhere a short sleep) between steps. */
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "parallel.h"
#include "shard_pool.h"

/* A step this slow (ns, serial or on the pool) may be reading pages: warm steps take 1-50 us (a
   search per shard, eval/RESULTS.md), a read from the device 0.1-20 ms. A walk over a wide range
   (a next-token distribution) can take as long warm, and is no reason for the pool: a slow step
   counts as cold only when the process took major faults since the last slow step. */
#define IG_COLD_STEP_NS 200000
/* Steps run on the pool after a cold one (a cold ∞-gram query takes 5-20 steps; a few fast
   ones among them -- the unigram table, pages already read -- must not end the cold spell). */
#define IG_COLD_CREDIT 16
#define IG_POOL_MAX_WORKERS 31

struct ig_shard_pool {
    int n_shards, n_workers;
    int mode;      /* atomic: IG_SHARDS_* */
    int credit;    /* atomic: pool steps left before going back to serial (AUTO) */
    long faults;   /* atomic: the process's major faults at the last slow step */
    int64_t steps; /* atomic: steps run on the pool so far */
    int owner;     /* atomic: pid of the process whose thread holds the pool, 0 = free */
    int pid;       /* the process whose threads these are */
    int started;   /* workers running */
    pthread_t th[IG_POOL_MAX_WORKERS];
    /* the current step (written by the holder before `next` is reset; see run_step) */
    ig_shard_fn fn;
    void *ctx;
    int next;       /* atomic: next shard to take */
    int32_t pending; /* atomic: shards of the step not done yet (the holder sleeps on it) */
    int32_t gen;     /* atomic: step number (workers sleep on it) */
    int32_t stop;    /* atomic */
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(int32_t *addr, int32_t seen) {
#if defined(__linux__) && defined(SYS_futex)
    (void)syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
#else
    (void)addr; (void)seen;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
#endif
}

static void futex_wake(int32_t *addr, int n) {
#if defined(__linux__) && defined(SYS_futex)
    (void)syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
#else
    (void)addr; (void)n;
#endif
}

/* Take shards of the current step until none is left. A thread that woke late may take shards
   of the next step: it reads fn / ctx after taking one, and the holder wrote them before
   making shards available, and cannot post another step before this one is done. */
static void take_shards(ig_shard_pool *p) {
    for (;;) {
        int i = __atomic_fetch_add(&p->next, 1, __ATOMIC_ACQUIRE);
        if (i >= p->n_shards) return;
        p->fn(p->ctx, i);
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) == 0) futex_wake(&p->pending, 1);
    }
}

static void *worker(void *arg) {
    ig_shard_pool *p = arg;
    int32_t seen = 0;
    for (;;) {
        int32_t g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) return NULL;
        if (g == seen) {
            futex_wait(&p->gen, seen);
            continue;
        }
        seen = g;
        take_shards(p);
    }
}

ig_shard_pool *ig_shard_pool_new(int n_shards) {
    if (n_shards < 2) return NULL;
    ig_shard_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL; /* (then the index runs serially) */
    p->n_shards = n_shards;
    p->n_workers = n_shards - 1 < IG_POOL_MAX_WORKERS ? n_shards - 1 : IG_POOL_MAX_WORKERS;
    p->mode = IG_SHARDS_AUTO;
    p->next = n_shards; /* no step yet */
    return p;
}

static void stop_workers(ig_shard_pool *p) {
    if (p->started && p->pid == (int)getpid()) {
        __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
        __atomic_add_fetch(&p->gen, 1, __ATOMIC_RELEASE);
        futex_wake(&p->gen, p->started);
        for (int t = 0; t < p->started; t++) pthread_join(p->th[t], NULL);
    } /* (in a forked child the threads do not exist: nothing to join) */
    p->started = 0;
}

void ig_shard_pool_free(ig_shard_pool *p) {
    if (!p) return;
    stop_workers(p);
    free(p);
}

/* Hold the pool for one step: 0 when another thread of this process holds it. A holder
   recorded by another process is the parent's, copied by fork: the pool is then re-made. */
static int acquire(ig_shard_pool *p, int pid) {
    int cur = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
    if (cur == pid) return 0;
    if (!__atomic_compare_exchange_n(&p->owner, &cur, pid, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 0;
    if (p->pid != pid) { /* first use in this process (or a forked child): fresh threads */
        p->started = 0;
        p->pid = pid;
        p->stop = 0;
        p->next = p->n_shards;
        p->pending = 0;
    }
    while (p->started < p->n_workers && ig_thread_start_quiet(&p->th[p->started], worker, p) == 0)
        p->started++; /* (fewer workers is fine: the holder takes the shards they do not) */
    return 1;
}

static void run_step(ig_shard_pool *p, ig_shard_fn fn, void *ctx) {
    p->fn = fn;
    p->ctx = ctx;
    __atomic_store_n(&p->pending, p->n_shards, __ATOMIC_RELAXED);
    __atomic_store_n(&p->next, 0, __ATOMIC_RELEASE);
    __atomic_add_fetch(&p->gen, 1, __ATOMIC_RELEASE);
    futex_wake(&p->gen, p->started);
    take_shards(p);
    for (;;) { /* the others' shards: their page reads are what is waited for, so sleep */
        int32_t left = __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE);
        if (left == 0) break;
        futex_wait(&p->pending, left);
    }
}

/* Did the process take major faults (pages read from the device) since the last call? */
static int new_major_faults(ig_shard_pool *p) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    long before = __atomic_exchange_n(&p->faults, ru.ru_majflt, __ATOMIC_RELAXED);
    return ru.ru_majflt > before;
}

void ig_each_shard(const ig_index *ix, ig_shard_fn fn, void *ctx) {
    ig_shard_pool *p = ix->pool;
    int mode = p ? __atomic_load_n(&p->mode, __ATOMIC_RELAXED) : IG_SHARDS_SERIAL;
    int cold = mode == IG_SHARDS_PARALLEL || (mode == IG_SHARDS_AUTO && __atomic_load_n(&p->credit, __ATOMIC_RELAXED) > 0);
    int64_t t0 = mode == IG_SHARDS_AUTO ? now_ns() : 0;
    int pid = cold ? (int)getpid() : 0;
    if (cold && acquire(p, pid)) {
        run_step(p, fn, ctx);
        __atomic_add_fetch(&p->steps, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&p->owner, 0, __ATOMIC_RELEASE);
    } else {
        for (int i = 0; i < ix->n_shards; i++) fn(ctx, i);
    }
    if (mode != IG_SHARDS_AUTO) return;
    if (now_ns() - t0 > IG_COLD_STEP_NS && new_major_faults(p)) __atomic_store_n(&p->credit, IG_COLD_CREDIT, __ATOMIC_RELAXED);
    else if (cold) { /* a fast step on the pool: one less before going back to serial */
        int c = __atomic_load_n(&p->credit, __ATOMIC_RELAXED);
        if (c > 0) __atomic_store_n(&p->credit, c - 1, __ATOMIC_RELAXED);
    }
}

int ig_set_shard_mode(ig_index *ix, int mode) {
    if (!ix || (mode != IG_SHARDS_SERIAL && mode != IG_SHARDS_PARALLEL && mode != IG_SHARDS_AUTO)) return IG_ERR_ARG;
    if (ix->pool) {
        __atomic_store_n(&ix->pool->mode, mode, __ATOMIC_RELAXED);
        __atomic_store_n(&ix->pool->credit, 0, __ATOMIC_RELAXED);
    }
    return IG_OK;
}

int ig_get_shard_mode(const ig_index *ix) {
    return ix && ix->pool ? __atomic_load_n(&ix->pool->mode, __ATOMIC_RELAXED) : IG_SHARDS_SERIAL;
}

int64_t ig_shard_pool_steps(const ig_index *ix) {
    return ix && ix->pool ? __atomic_load_n(&ix->pool->steps, __ATOMIC_RELAXED) : 0;
}
