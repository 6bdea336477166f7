/* sais.c - suffix arrays by induced sorting (SA-IS, Nong, Zhang & Chan 2009), written for this
 * project. One implementation serves 8-, 16- and 32-bit texts: every routine takes the symbol
 * width `w` and is force-inlined into one wrapper per width, so `w` is a constant there.
 *
 * Outline of one level (T of length n over [0, K), n >= 2, a virtual sentinel at T[n]):
 *   1. Sort the LMS substrings: drop the LMS positions at their bucket ends, induce L then S.
 *   2. Name them (equal substrings share a name) into the reduced string s1 of length
 *      n1 <= n/2; if a name repeats, sort s1's suffixes recursively (32-bit path).
 *   3. Drop the LMS suffixes, now sorted, at their bucket ends and induce L then S again.
 * Types are never stored: whether a predecessor is L or S is decided when it is placed, from
 * the two symbols involved, and carried in the sign of its SA entry.
 *
 * Naming without comparing substrings (levels with n < 2^30, the usual case): the two stage-1
 * passes also record where the sort key (the LMS prefix: symbols and types up to the next LMS
 * position) changes, as bit 30 of the entry at the first slot of each group of equal keys. A
 * pass scans the sources in sorted order and counts the group boundaries it crosses (d); an
 * induced entry starts a new group unless the previous entry induced into the same bucket came
 * from a source with the same count. Slots keep their mark when their entry is consumed, so
 * after stage 1 two neighbouring LMS entries have equal substrings iff no slot between them
 * (the right one included) is marked. Deeper texts (n >= 2^30) have no spare bit and compare
 * the substrings instead (as do levels whose bucket arrays do not fit the memory budget).
 *
 * Peak extra memory, in bytes, besides SA itself (and <= 31 small stack frames):
 *   Ke = largest symbol + 1 (after a u32 remap: the number of distinct symbols).
 *   level 0    4*Ke bucket pointers, + 4*Ke cached counts and 4*Ke for the group counts /
 *              LMS counts when 3*Ke <= max(n/2, 2^17) (else slower fallbacks, no memory).
 *   deeper     the reduced problems' buckets live in SA's free space when they fit, else are
 *              malloc'd, never more than max(n/2, 2^17) int32 at a time. Level-0 buckets are
 *              freed before recursing unless small, so the two do not add up.
 *   u32 remap  + 4n for a dense copy of the text, only when Ke > max(n, 65536).
 *   => peak <= max(2n, 12*Ke, 1.5 MiB) (+ 4n when remapped); for u8/u16: <= max(2n, 1.5 MiB).
 *   Measured: < 0.1n on source-code bytes, 1.2n on i.i.d. Zipf tokens (the reduced problem's
 *   counts); the 2n bound is reached only by adversarial inputs.
 *   Two threads (induce_blocks): + 512 KiB of block cache while a pass runs.
 * Budget 6 bytes per token (SA + worst case) + 2 MiB for u8/u16 input.
 */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise() under -std=c99 */
#endif
#include "sais.h"
#include "parallel.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SA_INLINE static inline __attribute__((always_inline))
#define SA_NOINLINE static __attribute__((noinline))
#define SA_PREFETCH_R(p) __builtin_prefetch((const void *)(p), 0, 3)
#define SA_PREFETCH_W(p) __builtin_prefetch((const void *)(p), 1, 3)
#else
#define SA_INLINE static inline
#define SA_NOINLINE static
#define SA_PREFETCH_R(p) ((void)0)
#define SA_PREFETCH_W(p) ((void)0)
#endif


/* Most passes touch the text or the buckets at random positions known a little in advance;
   they prefetch PF items ahead (a few hundred ns of work, more than a DRAM round trip). */
#ifndef PF
#define PF 64
#endif
#ifndef BIG_PIPE
#define BIG_PIPE 2
#endif
#define BIG_K (1 << 17) /* bucket arrays beyond this many (512 KiB) fall out of L2 */

/* Stage-1 entries in the naming mode: bit 31 = type flag (see induce), bit 30 = group mark. */
#define MARK ((int32_t)1 << 30)
#define VMASK (MARK - 1)
#define MARK_LIMIT ((int64_t)1 << 30) /* texts this long or longer name by comparing */

/* Symbol i of a text of w-byte symbols. */
SA_INLINE uint32_t sym(const void *T, int w, int32_t i) {
    if (w == 1) return ((const uint8_t *)T)[i];
    if (w == 2) return ((const uint16_t *)T)[i];
    return ((const uint32_t *)T)[i];
}

/* Transparent huge pages for a large buffer: the passes below hit the text and SA at random,
   and with 4 KiB pages most of those accesses would also miss the TLB. A buffer about to be
   first touched (SA, our own allocations) gets MADV_HUGEPAGE; the caller's text, already
   populated, is collapsed in place (MADV_COLLAPSE, Linux >= 6.1; contents unchanged). On the
   test machine collapsing 100 MB took ~0.2 s and saved ~1 s of the passes over it. Only
   hints: failures (old kernels, file mappings, no free huge pages) are ignored. */
#if defined(__linux__) && defined(MADV_HUGEPAGE) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25
#endif
static void hint_hugepages(const void *p, size_t bytes, int populated) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t H = (uintptr_t)1 << 21;
    uintptr_t a = ((uintptr_t)p + H - 1) & ~(H - 1), e = ((uintptr_t)p + bytes) & ~(H - 1);
    if (bytes >= ((size_t)4 << 20) && e > a)
        (void)madvise((void *)a, (size_t)(e - a), populated ? MADV_COLLAPSE : MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
    (void)populated;
#endif
}

/* With INFINIGRAM_BUILD_TIMING set, each step of each level reports its wall time, the
   process's CPU time (all threads; on a shared machine the fairer figure) and the calling
   thread's (with two threads: the step's critical path when the other has a core of its own,
   as the main thread waits asleep) to stderr (profiling builds; `t` holds the step's start,
   updated). */
typedef struct {
    int on, level;
} sa_timer;

typedef struct {
    double wall, cpu, main; /* main: this (the calling) thread's CPU time */
} sa_clock;

static double sa_clock_of(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static sa_clock sa_now(void) {
    sa_clock c = {sa_clock_of(CLOCK_MONOTONIC), sa_clock_of(CLOCK_PROCESS_CPUTIME_ID),
                  sa_clock_of(CLOCK_THREAD_CPUTIME_ID)};
    return c;
}

static void sa_step(const sa_timer *tm, sa_clock *t, const char *what, int32_t n, int32_t K) {
    if (!tm->on) return;
    sa_clock now = sa_now();
    fprintf(stderr, "infinigram sais: level %d %-22s %7.3f s wall %7.3f s cpu %7.3f s main-thread cpu  (n=%d K=%d)\n",
            tm->level, what, now.wall - t->wall, now.cpu - t->cpu, now.main - t->main, n, K);
    *t = now;
}

/* ---- buckets ----------------------------------------------------------------------------- */

typedef struct {
    int32_t *B;         /* K bucket pointers, rebuilt before every pass */
    int32_t *C;         /* K symbol counts, or NULL: recount from the text each time */
    int32_t *A;         /* K more: group counts in stage 1, LMS counts in stage 3; or NULL */
    int32_t K;
    int own_B, own_C, own_A; /* 1 = malloc'd, 0 = carved out of free SA space */
} buckets;

SA_INLINE void count_syms(const void *T, int w, int32_t n, int32_t *cnt, int32_t K) {
    memset(cnt, 0, (size_t)K * sizeof(int32_t));
    if (K > BIG_K) /* counters at random */
        for (int32_t i = 0; i < n - 4 * PF; i++) {
            SA_PREFETCH_W(cnt + sym(T, w, i + 4 * PF));
            cnt[sym(T, w, i)]++;
        }
    for (int32_t i = K > BIG_K && n > 4 * PF ? n - 4 * PF : 0; i < n; i++) cnt[sym(T, w, i)]++;
}

/* Threading of the passes: a helper for texts of at least min_n entries, blocks of blk. */
typedef struct {
    int helper; /* 0: never */
    int32_t min_n, blk;
    /* block-parallel plain passes (see induce_blocks): block cap, shortest run worth two
       threads, 0 = not for this pass */
    int32_t pblk, pmin;
    int blocks;
} par_cfg;

/* Free memory a level may use for its buckets: part of the caller's SA (never overlapping this
   level's T or SA), and how many int32 it may malloc besides B. `plain` (tests) forces the
   fallbacks: 1 = no A array (compare names, place by reading symbols), 2 = compare names. */
typedef struct {
    int32_t *ws;
    int64_t wsn;
    int64_t budget;
    int plain;
    par_cfg par;
    ig_sais_progress_fn done; /* top level only: told as stage 3 finalizes ranges of SA */
    void *done_ctx;
    int32_t done_every;       /* entries between two reports */
    sa_timer tm;
} workspace;

/* One K-array from the free space or, within the budget, malloc (NULL when neither). */
static int32_t *carve(workspace *ws, int64_t *budget, int32_t K, int *own) {
    *own = 0;
    if (K <= ws->wsn) {
        int32_t *p = ws->ws;
        ws->ws += K;
        ws->wsn -= K;
        return p;
    }
    if (K > *budget) return NULL;
    int32_t *p = (int32_t *)malloc((size_t)K * sizeof(int32_t));
    if (!p) return NULL;
    hint_hugepages(p, (size_t)K * sizeof(int32_t), 0);
    *budget -= K;
    *own = 1;
    return p;
}

/* B is required (placed in the free space or malloc'd whatever the budget); C and A are
   optional and taken in that order while space or budget lasts. */
SA_INLINE int buckets_init(buckets *bk, const void *T, int w, int32_t n, int32_t K, workspace ws) {
    int64_t budget = ws.budget;
    bk->K = K;
    bk->own_B = bk->own_C = bk->own_A = 0;
    if (K <= ws.wsn) {
        bk->B = ws.ws;
        ws.ws += K;
        ws.wsn -= K;
    } else {
        bk->B = (int32_t *)malloc((size_t)K * sizeof(int32_t));
        if (!bk->B) return IG_ERR_NOMEM;
        hint_hugepages(bk->B, (size_t)K * sizeof(int32_t), 0);
        bk->own_B = 1;
        budget -= K;
    }
    bk->C = carve(&ws, &budget, K, &bk->own_C);
    bk->A = bk->C && ws.plain != 1 ? carve(&ws, &budget, K, &bk->own_A) : NULL;
    if (bk->C) count_syms(T, w, n, bk->C, K);
    return 0;
}

static void buckets_free(buckets *bk) {
    if (bk->own_B) free(bk->B);
    if (bk->own_C) free(bk->C);
    if (bk->own_A) free(bk->A);
    bk->B = bk->C = bk->A = NULL;
    bk->own_B = bk->own_C = bk->own_A = 0;
}

/* m more int32 beside the level's bucket arrays: free SA space past them, else malloc within
   the budget; NULL when neither (callers then do without). *own = 1 when malloc'd. */
static int32_t *scratch_after(const buckets *bk, workspace ws, int64_t m, int *own) {
    int64_t used = (bk->own_B ? 0 : bk->K) + (bk->C && !bk->own_C ? bk->K : 0) + (bk->A && !bk->own_A ? bk->K : 0);
    int64_t budget = ws.budget - (bk->own_B ? bk->K : 0) - (bk->own_C ? bk->K : 0) - (bk->own_A ? bk->K : 0);
    *own = 0;
    if (used + m <= ws.wsn) return ws.ws + used;
    if (m > budget) return NULL;
    int32_t *p = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    if (!p) return NULL;
    hint_hugepages(p, (size_t)m * sizeof(int32_t), 0);
    *own = 1;
    return p;
}

/* bg[2c] = B[c] (bucket pointers), bg[2c+1] = -1 (no group seen yet). */
static void interleave(int32_t *restrict bg, const int32_t *restrict B, int32_t K) {
    for (int32_t c = 0; c < K; c++) {
        bg[2 * (size_t)c] = B[c];
        bg[2 * (size_t)c + 1] = -1;
    }
}

/* B[c] = first slot of bucket c (ends == 0) or one past its last slot (ends == 1). */
SA_INLINE void bucket_bounds(const void *T, int w, int32_t n, const buckets *bk, int ends) {
    int32_t *B = bk->B;
    const int32_t *cnt = bk->C;
    if (!cnt) {
        count_syms(T, w, n, B, bk->K);
        cnt = B;
    }
    int32_t sum = 0;
    for (int32_t c = 0; c < bk->K; c++) {
        int32_t x = cnt[c]; /* read before B[c] is written: cnt may be B */
        sum += x;
        B[c] = ends ? sum : sum - x;
    }
}

/* ---- LMS positions ------------------------------------------------------------------------ */

enum { LMS_SEED, LMS_LEN, LMS_LIST, LMS_COUNT };

/* Visit the LMS positions (S-type, preceded by L-type) right to left; n-1 is always L. Modes:
   LMS_SEED:  SA[--B[T[p]]] = p (stage 1 seeds); returns the count n1.
   LMS_LEN:   SA[n1 + p/2] = length of the LMS substring at p, up to and including the next LMS
              position (n, the sentinel, for the last one). Slots p/2 are distinct: LMS
              positions are >= 2 apart.
   LMS_LIST:  SA[n - n1 + k] = k-th LMS position in text order (SA[n - n1 - 1] is clobbered).
   LMS_COUNT: B[c] = number of LMS positions holding symbol c (B zeroed first).
   LMS_LIST with B != NULL also counts as LMS_COUNT does. */
SA_INLINE int32_t lms_scan(const void *restrict T, int w, int32_t n, int mode,
                           int32_t *restrict SA, int32_t *restrict B, int32_t K, int32_t n1) {
    int32_t cnt = 0, next = n;
    uint32_t c1 = sym(T, w, n - 1);
    int32_t s1 = 0; /* type of position i+1: 1 = S */
    const int counting = mode == LMS_COUNT || (mode == LMS_LIST && B);
    if (counting) memset(B, 0, (size_t)K * sizeof(int32_t));
    for (int32_t i = n - 2; i >= 0; i--) {
        if ((mode == LMS_SEED || counting) && K > BIG_K && i >= 4 * PF) /* random bucket pointers */
            SA_PREFETCH_W(B + sym(T, w, i - 4 * PF));
        uint32_t c0 = sym(T, w, i);
        int32_t s0 = (c0 < c1) | ((c0 == c1) & s1), m = s1 & (s0 ^ 1), p = i + 1;
        if (mode == LMS_LIST) {
            /* branch-free: always write below the list, keep it only if p is LMS. The slot
               below the list is >= n1 even when the list is complete, as n1 <= (n-1)/2. */
            SA[n - 1 - cnt] = p;
            cnt += m;
        }
        if (counting) B[c1] += m;
        if (mode != LMS_LIST && m) {
            if (mode == LMS_SEED) SA[--B[c1]] = p;
            if (mode == LMS_LEN) SA[n1 + (p >> 1)] = next - p + 1;
            next = p;
            cnt++;
        }
        s1 = s0;
        c1 = c0;
    }
    return cnt;
}

/* ---- induced sorting ---------------------------------------------------------------------- *
 * Stage 1 (sorting LMS substrings) uses this encoding in SA:
 *   L pass: v > 0: suffix v whose predecessor v-1 is L: induce v-1, then clear the slot;
 *           v < 0: suffix -v whose predecessor is S: flip to +(-v) for the S pass.
 *   S pass: v > 0: induce v-1 (S) and clear; an induced suffix whose predecessor is L is an LMS
 *           suffix and is stored as -q, so afterwards exactly the LMS entries are negative.
 * In the naming mode (PASS_L1M, PASS_S1M) the same roles are carried by bit 31 (set = the
 * negative case above) with the value in bits 0..29, bit 30 marking group starts; consumed
 * entries keep their mark.
 * Stage 3 (final) keeps every entry: positive = final, ~q = predecessor still to induce in the
 * S pass; in the L pass positive entries also have their (L-type) predecessor induced.
 * Induced entries always land strictly ahead of the scan, so every slot is written before it
 * is read. */

enum { PASS_L1, PASS_S1, PASS_L3, PASS_S3, PASS_L1M, PASS_S1M };

/* The predecessor an entry v induces in `pass`, or -1 when v induces nothing. */
SA_INLINE int32_t pred_of(int32_t v, int pass) {
    if (pass == PASS_S3) return v < 0 ? ~v - 1 : -1;
    if (pass == PASS_L1M || pass == PASS_S1M) return v >= 0 && (v & VMASK) ? (v & VMASK) - 1 : -1;
    return v > 0 ? v - 1 : -1;
}

/* What inducing q needs from the text: its symbol c and the type bit stored with it (L passes:
   q's predecessor is S; S passes: it is L (stage 1) or S (stage 3)), as c << 1 | bit. */
SA_INLINE uint32_t pred_info(const void *T, int w, int32_t q, int pass) {
    uint32_t c = sym(T, w, q), b;
    if (q == 0) return c << 1;
    b = sym(T, w, q - 1);
    if (pass == PASS_S1 || pass == PASS_S1M) return c << 1 | (b > c);
    if (pass == PASS_S3) return c << 1 | (b <= c);
    return c << 1 | (b < c);
}

/* ---- a helper thread for the induction passes ---------------------------------------------- *
 * Each pass reads, for most SA entries in scan order, two symbols at a random text position:
 * that is what bounds it (one DRAM round trip each, overlapped by prefetching). A second thread
 * fetches them ahead of the scan: of the blocks of `blk` entries in scan order it takes two
 * in three (the main thread, which also places the entries, gathers the third itself), and
 * stores for each entry v it sees (v, pred_info) in a ring of cached blocks. The main thread
 * uses a cached pair only if the entry still holds v (an entry induced into the block after
 * the helper read it, ~3% of them, is fetched directly), so the result does not depend on
 * timing. The main thread never waits for the helper: a block the helper has not finished is
 * processed as without it (and the helper skips it), so a helper starved of CPU time costs
 * little. Entries the helper reads may be written concurrently: those accesses (and the main
 * thread's SA writes in these passes) are relaxed atomics, plain moves on common hardware. */
#define RING 8 /* cached blocks; the helper stays less than RING blocks ahead */
#define HELPER_SHARE(b) ((b) % 3 != 0) /* blocks the helper gathers */

typedef struct {
    const void *T;
    int32_t *SA;
    int32_t n, blk, nblk;
    int w, pass;
    uint64_t *ring;    /* RING * blk (v, info) pairs */
    int32_t main_at;   /* atomic: block the main thread is in */
    int32_t ready[RING]; /* atomic: block whose pairs ring slot r holds (-1: none) */
    int32_t stop;      /* atomic */
} helper;

#define A_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define A_STORE(p, x) __atomic_store_n((p), (x), __ATOMIC_RELAXED)

/* Waiting for the main thread to move on: a short spin, then sleeps that leave the CPU to it. */
static void wait_a_little(int spins) {
#if defined(__x86_64__) || defined(__i386__)
    if (spins < 16) {
        __builtin_ia32_pause();
        return;
    }
#endif
    struct timespec ts = {0, 20000};
    (void)spins;
    nanosleep(&ts, NULL);
}

SA_INLINE void helper_loop(helper *h, int w, int pass) {
    const int left = pass == PASS_L1 || pass == PASS_L3 || pass == PASS_L1M;
    const char *Tb = (const char *)h->T;
    int32_t *S = h->SA;
    for (int32_t b = 1; b < h->nblk && !__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE); b++) {
        if (!HELPER_SHARE(b)) continue;
        int32_t at = __atomic_load_n(&h->main_at, __ATOMIC_ACQUIRE);
        for (int spins = 0; b >= at + RING - 1; spins++) { /* far enough ahead: wait */
            if (__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) return;
            wait_a_little(spins);
            at = __atomic_load_n(&h->main_at, __ATOMIC_ACQUIRE);
        }
        if (b <= at) continue; /* the main thread got there first: skip ahead */
        uint64_t *out = h->ring + (size_t)(b % RING) * (size_t)h->blk;
        int32_t k0 = b * h->blk, m = h->n - k0 < h->blk ? h->n - k0 : h->blk, k;
        for (k = 0; k < m; k++) {
            if ((k & 1023) == 1023 && __atomic_load_n(&h->main_at, __ATOMIC_RELAXED) >= b) break;
            int32_t i = left ? k0 + k : h->n - 1 - (k0 + k);
            if (k + PF < m) {
                int32_t qf = pred_of(A_LOAD(&S[left ? i + PF : i - PF]), pass);
                SA_PREFETCH_R(Tb + (size_t)w * (size_t)(qf > 0 ? qf - 1 : 0));
            }
            int32_t v = A_LOAD(&S[i]), q = pred_of(v, pass);
            out[k] = (uint64_t)(uint32_t)v << 32 | (q >= 0 ? pred_info(h->T, w, q, pass) : 0);
        }
        if (k == m) __atomic_store_n(&h->ready[b % RING], b, __ATOMIC_RELEASE);
    }
}

static void *helper_main(void *arg) {
    helper *h = (helper *)arg;
#define HELPER_CASE(W)                                                                       \
    switch (h->pass) {                                                                       \
    case PASS_L1: helper_loop(h, W, PASS_L1); break;                                         \
    case PASS_S1: helper_loop(h, W, PASS_S1); break;                                         \
    case PASS_L3: helper_loop(h, W, PASS_L3); break;                                         \
    case PASS_S3: helper_loop(h, W, PASS_S3); break;                                         \
    case PASS_L1M: helper_loop(h, W, PASS_L1M); break;                                       \
    default: helper_loop(h, W, PASS_S1M); break;                                             \
    }
    if (h->w == 1) HELPER_CASE(1)
    else if (h->w == 2) HELPER_CASE(2)
    else HELPER_CASE(4)
#undef HELPER_CASE
    return NULL;
}

/* Start a helper for one pass (0 when none: disabled, small, or no thread). */
static int helper_start(helper *h, pthread_t *th, par_cfg par, const void *T, int w, int32_t *SA,
                        int32_t n, int pass) {
    if (!par.helper || n < par.min_n || n < 2 * par.blk) return 0;
    h->T = T;
    h->SA = SA;
    h->n = n;
    h->blk = par.blk;
    h->nblk = (int32_t)(((int64_t)n + par.blk - 1) / par.blk);
    h->w = w;
    h->pass = pass;
    h->main_at = 0;
    h->stop = 0;
    for (int r = 0; r < RING; r++) h->ready[r] = -1;
    h->ring = (uint64_t *)malloc((size_t)RING * (size_t)par.blk * sizeof(uint64_t));
    if (!h->ring) return 0;
    if (pthread_create(th, NULL, helper_main, h) != 0) {
        free(h->ring);
        return 0;
    }
    return 1;
}

static void helper_stop(helper *h, pthread_t th) {
    __atomic_store_n(&h->stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    free(h->ring);
}

/* ---- block-parallel induction on two threads ----------------------------------------------- *
 * The plain passes (PASS_L1, PASS_S1, PASS_L3, PASS_S3) can also run on two threads with the
 * placement itself split (the idea of libsais's parallel induction; written for this code).
 * The scan is cut into blocks of slots that are already final: a run of non-zero slots from the
 * scan position. Empty slots are 0 and every induced entry lands in an empty slot ahead of the
 * scan, so nothing induced from a block lands inside it (a slot holding suffix 0 also reads 0:
 * it induces nothing, and only cuts a block short). For PASS_S3 the LMS entries left in the
 * S parts of the buckets by stage 3's placement are cleared after PASS_L3 (the S pass rewrites
 * every S slot before reading it) so that the rule holds there too. Per block:
 *   phase 1: each thread takes half of the block: reads the entries and the symbols they
 *     induce (the random text reads, the bulk of the work), does the block's own slot
 *     updates, and caches the entries that induce something, sorted by the thread that owns
 *     their bucket (main: symbols below `ksplit`, about half of the text; worker: the rest);
 *   phase 2: each thread places its own entries of both halves, in scan order.
 * Each bucket is filled by one thread, in scan order, exactly as one thread would fill it: the
 * result does not depend on timing, and no bucket's slots or pointer bounce between the two
 * cores (splitting by halves of the block instead made every write a cache-line transfer).
 * Runs shorter than `pmin` are scanned by the main thread alone. */

typedef struct {
    const void *T;
    int32_t *SA, *B;
    int32_t n, K;
    int w, pass;
    uint32_t ksplit;  /* buckets [0, ksplit) are the main thread's in phase 2 */
    uint64_t *cache;  /* per block slot: v << 32 | pred_info, sorted by owner per half */
    int32_t k0, mid, k1; /* current block in scan order: halves [k0, mid), [mid, k1) */
    int32_t nmain[2], nwork[2]; /* per half: entries main / the worker places */
    int32_t go, ph1, ph2;       /* atomic: blocks released, worker's phase 1 / 2 done */
    int32_t main1;              /* atomic: main's phase 1 done */
    int32_t stop;               /* atomic */
    int32_t sleepers;           /* atomic: threads that may sleep in pb_wait */
} pblock;

/* Waiting on the partner thread for `*flag >= want`: a short spin (phases are ~0.1 ms), then
   sleep (a futex on Linux) so that a partner descheduled on a busy machine gets the CPU and
   the wait costs no CPU time. `sleepers` counts the threads that may be asleep on a flag of
   this block; pb_signal wakes them only then (sequentially consistent: a waiter either sees
   the new value or is seen asleep). A wait never sleeps longer than 1 ms per check. */
static void pb_wait(int32_t *flag, int32_t want, int32_t *sleepers) {
    for (int spins = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) < want; spins++) {
#if defined(__x86_64__) || defined(__i386__)
        if (spins < 256) {
            __builtin_ia32_pause();
            continue;
        }
#endif
        __atomic_fetch_add(sleepers, 1, __ATOMIC_SEQ_CST);
        int32_t seen = __atomic_load_n(flag, __ATOMIC_SEQ_CST);
        if (seen < want) {
#if defined(__linux__) && defined(SYS_futex)
            struct timespec ts = {0, 1000000};
            (void)syscall(SYS_futex, flag, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
#else
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
#endif
        }
        __atomic_fetch_sub(sleepers, 1, __ATOMIC_SEQ_CST);
    }
}

static void pb_signal(int32_t *flag, int32_t value, int32_t *sleepers) {
    __atomic_store_n(flag, value, __ATOMIC_SEQ_CST);
#if defined(__linux__) && defined(SYS_futex)
    if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST) > 0) (void)syscall(SYS_futex, flag, FUTEX_WAKE_PRIVATE, 2, NULL, NULL, 0);
#else
    (void)sleepers;
#endif
}

SA_INLINE int pb_left(int pass) { return pass == PASS_L1 || pass == PASS_L3; }

/* Phase 1 over scan slots [ka, kb) (half h of the block): the block's own slot updates, and
   the entries that induce something into the half's cache region, sorted by owner without a
   branch: main's (bucket < ksplit) from the front in scan order, the worker's from the back
   in reverse scan order (each entry is written at both ends; only one end advances). */
SA_INLINE void pb_phase1(pblock *p, int w, int pass, int h, int32_t ka, int32_t kb) {
    const int left = pb_left(pass);
    const int32_t step = left ? 1 : -1;
    const char *Tb = (const char *)p->T;
    const uint32_t ksplit = p->ksplit;
    int32_t *SA = p->SA;
    uint64_t *out = p->cache + (ka - p->k0);
    int32_t f = 0, e = kb - ka; /* main's entries out[0, f), the worker's out[e, kb - ka) */
    for (int32_t k = ka, i = left ? ka : p->n - 1 - ka; k < kb; k++, i += step) {
        if (k < kb - PF) {
            int32_t qf = pred_of(A_LOAD(&SA[i + PF * step]), pass);
            SA_PREFETCH_R(Tb + (size_t)w * (size_t)(qf > 0 ? qf - 1 : 0));
        }
        int32_t v = A_LOAD(&SA[i]), q = pred_of(v, pass);
        uint32_t info = q >= 0 ? pred_info(p->T, w, q, pass) : 0;
        uint64_t x = (uint64_t)(uint32_t)v << 32 | info;
        int mine = q >= 0 && (info >> 1) < ksplit, theirs = q >= 0 && (info >> 1) >= ksplit;
        out[f] = x; /* f <= e - 1 here: at most kb - ka entries in all */
        out[e - 1] = x;
        f += mine;
        e -= theirs;
        if (pass == PASS_L1 && v <= 0) A_STORE(&SA[i], -v);                            /* for the S pass */
        else if ((pass == PASS_L1 || pass == PASS_S1) && q >= 0) A_STORE(&SA[i], 0); /* consumed */
        else if (pass == PASS_S3 && q >= 0) A_STORE(&SA[i], ~v);                      /* final */
    }
    p->nmain[h] = f;
    p->nwork[h] = kb - ka - e;
}

/* Place one cached entry (it induces into a bucket of this thread). */
SA_INLINE void pb_place(int32_t *SA, int32_t *B, int pass, int left, uint64_t x) {
    uint32_t info = (uint32_t)x, c = info >> 1;
    int32_t q = pred_of((int32_t)(x >> 32), pass), j = left ? B[c]++ : --B[c];
    int32_t neg = pass == PASS_L1 || pass == PASS_S1 ? -q : ~q;
    A_STORE(&SA[j], info & 1 ? neg : q);
}

/* Phase 2: main (worker = 0) places the front lists of both halves in scan order, the worker
   the back lists (read backwards: scan order). */
SA_INLINE void pb_phase2(pblock *p, int pass, int worker) {
    const int left = pb_left(pass), big = p->K > BIG_K;
    int32_t *SA = p->SA, *B = p->B;
    for (int h = 0; h < 2; h++) {
        const int32_t len = h ? p->k1 - p->mid : p->mid - p->k0;
        const uint64_t *base = p->cache + (h ? p->mid - p->k0 : 0);
        const int32_t m = worker ? p->nwork[h] : p->nmain[h];
        for (int32_t t = 0; t < m; t++) {
            const int32_t at = worker ? len - 1 - t : t, ahead = worker ? at - PF : at + PF;
            if (big && t + PF < m) SA_PREFETCH_W(B + ((uint32_t)base[ahead] >> 1));
            pb_place(SA, B, pass, left, base[at]);
        }
    }
}

SA_INLINE void pb_worker_loop(pblock *p, int w, int pass) {
    for (int32_t b = 1;; b++) {
        pb_wait(&p->go, b, &p->sleepers); /* (stop also raises go) */
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) return;
        pb_phase1(p, w, pass, 1, p->mid, p->k1);
        pb_signal(&p->ph1, b, &p->sleepers);
        pb_wait(&p->main1, b, &p->sleepers);
        pb_phase2(p, pass, 1);
        pb_signal(&p->ph2, b, &p->sleepers);
    }
}

static void *pb_worker_main(void *arg) {
    pblock *p = (pblock *)arg;
#define PB_CASE(W)                                                                           \
    switch (p->pass) {                                                                       \
    case PASS_L1: pb_worker_loop(p, W, PASS_L1); break;                                      \
    case PASS_S1: pb_worker_loop(p, W, PASS_S1); break;                                      \
    case PASS_L3: pb_worker_loop(p, W, PASS_L3); break;                                      \
    default: pb_worker_loop(p, W, PASS_S3); break;                                           \
    }
    if (p->w == 1) PB_CASE(1)
    else if (p->w == 2) PB_CASE(2)
    else PB_CASE(4)
#undef PB_CASE
    return NULL;
}

/* Whether the plain passes of a level of n symbols over [0, K) run block-parallel. */
static int pb_enabled(par_cfg par, int32_t n) { return par.helper && par.blocks && n >= par.min_n; }

SA_INLINE int32_t induce_run(const void *restrict T, int w, int32_t *restrict SA, int32_t n,
                             int32_t *restrict B, int32_t *restrict G, int bs, int pass, int big, int helped,
                             int32_t kb, int32_t ke, int32_t d);

/* A plain pass (after the sentinel's entry) with the placement split over two threads, see
   above. Returns 0 when done, -1 when it could not start (memory, thread): nothing was done. */
SA_INLINE int induce_blocks(const void *T, int w, int32_t *SA, int32_t n, int32_t *B, int32_t K, int pass,
                            par_cfg par, ig_sais_progress_fn done, void *done_ctx, int32_t done_every) {
    const int left = pb_left(pass);
    const int32_t cap = par.pblk, step = left ? 1 : -1;
    pblock p;
    memset(&p, 0, sizeof p);
    p.T = T;
    p.SA = SA;
    p.B = B;
    p.n = n;
    p.K = K;
    p.w = w;
    p.pass = pass;
    /* the main thread's buckets: those below the middle slot of SA (B holds every bucket's
       first slot for an L pass, one past its last for an S pass: non-decreasing) */
    uint32_t lo = 0, hi = (uint32_t)K;
    while (lo < hi) {
        uint32_t m = lo + (hi - lo) / 2;
        if (B[m] < n / 2) lo = m + 1;
        else hi = m;
    }
    p.ksplit = lo;
    p.cache = (uint64_t *)malloc((size_t)cap * sizeof(uint64_t));
    pthread_t th;
    if (!p.cache || pthread_create(&th, NULL, pb_worker_main, &p) != 0) {
        free(p.cache);
        return -1;
    }
    int64_t last_done = n; /* progress reports (PASS_S3 only), as in induce */
    int32_t next_done = done && done_every < n ? done_every : n, b = 0;
    for (int32_t k = 0; k < n;) {
        if (pass == PASS_S3 && done && k == next_done) { /* SA[n-k .. n) is final */
            done(done_ctx, (int64_t)n - k, last_done);
            last_done = (int64_t)n - k;
            next_done = next_done > n - done_every ? n : next_done + done_every;
        }
        int32_t lim = pass == PASS_S3 && done && next_done < n ? next_done : n;
        if (lim - k > cap) lim = k + cap;
        int32_t e = k;
        for (int32_t i = left ? k : n - 1 - k; e < lim && SA[i] != 0; e++, i += step) {
        }
        if (e - k < par.pmin) { /* a short run: the serial scan, over pmin slots at least */
            int32_t ke = lim - k < par.pmin ? lim : k + par.pmin; /* (no overflow near 2^31) */
            (void)induce_run(T, w, SA, n, B, NULL, 1, pass, K > BIG_K, 0, k, ke > e ? ke : e, 0);
            k = ke > e ? ke : e;
            continue;
        }
        b++;
        p.k0 = k;
        p.k1 = e;
        p.mid = k + (e - k) / 2;
        pb_signal(&p.go, b, &p.sleepers);
        pb_phase1(&p, w, pass, 0, p.k0, p.mid);
        pb_signal(&p.main1, b, &p.sleepers);
        pb_wait(&p.ph1, b, &p.sleepers);
        pb_phase2(&p, pass, 0);
        pb_wait(&p.ph2, b, &p.sleepers);
        k = e;
    }
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    pb_signal(&p.go, b + 1, &p.sleepers);
    pthread_join(th, NULL);
    free(p.cache);
    if (pass == PASS_S3 && done && last_done > 0) done(done_ctx, 0, last_done);
    return 0;
}

/* ---- induction passes --------------------------------------------------------------------- */

/* Bucket pointer and group count of symbol c: B and G are separate arrays (bs = 1) or
   interleaved in one (bs = 2, G = B + 1). */
#define BK(c) B[(size_t)(c) * (size_t)bs]
#define GK(c) G[(size_t)(c) * (size_t)bs]

/* Place what entry v (at slot i, scanned in `pass`) induces: its predecessor q (or -1) whose
   symbol and type bit are `info` (pred_info). Returns the group count d (naming passes). SA
   stores are relaxed atomics while a helper thread reads SA (`helped`). */
SA_INLINE int32_t induce_put(int32_t *restrict SA, int32_t *restrict B, int32_t *restrict G, int bs, int pass,
                             int helped, int32_t i, int32_t v, int32_t q, uint32_t info, int32_t d) {
    const uint32_t c = info >> 1, tb = info & 1;
#define PUT(j, x) (helped ? A_STORE(&SA[j], (x)) : (void)(SA[j] = (x)))
    switch (pass) {
    case PASS_L1: /* v > 0: induce v-1 (L) and clear; v < 0: keep -v for the S pass */
        if (q >= 0) {
            PUT(BK(c)++, tb ? -q : q);
            PUT(i, 0);
        } else {
            PUT(i, -v);
        }
        break;
    case PASS_S1: /* v > 0: induce v-1 (S) and clear; an LMS suffix is stored negated */
        if (q >= 0) {
            PUT(--BK(c), tb ? -q : q);
            PUT(i, 0);
        }
        break;
    case PASS_L1M: /* as PASS_L1; a slot's mark (a new group starts here) counts into d */
        d += (int32_t)((uint32_t)v >> 30) & 1;
        if (v < 0) {
            PUT(i, v & INT32_MAX);
        } else if (q >= 0) {
            int32_t e = q | (GK(c) != d ? MARK : 0); /* left to right: marks the first */
            PUT(BK(c)++, tb ? e | INT32_MIN : e);
            GK(c) = d;
            PUT(i, v & MARK);
        }
        break;
    case PASS_S1M: /* as PASS_S1, right to left: an entry is marked when placed and the
                      mark of its right neighbour (placed just before, same bucket) is
                      cleared if the two came from one group */
        if (q >= 0) {
            int32_t j = --BK(c);
            if (GK(c) == d) PUT(j + 1, SA[j + 1] & ~MARK); /* (GK(c) == -1: none yet) */
            GK(c) = d;
            PUT(j, tb ? (q | MARK) | INT32_MIN : q | MARK);
            PUT(i, SA[i] & MARK); /* (re-read: j + 1 may be i) */
        }
        d += (int32_t)((uint32_t)SA[i] >> 30) & 1; /* a mark here: i-1 is another group */
        break;
    case PASS_L3: /* v > 0: induce v-1 (L); ~q marks a predecessor left for the S pass */
        if (q >= 0) PUT(BK(c)++, tb ? ~q : q);
        break;
    default: /* PASS_S3: v < 0: make it final and induce its predecessor (S) */
        if (q >= 0) {
            PUT(i, ~v);
            PUT(--BK(c), tb ? ~q : q);
        }
        break;
    }
#undef PUT
    return d;
}

/* Scan positions [kb, ke) of a pass with no cached symbols: the tight loop. Symbols are fetched
   2*PF entries ahead; with a large alphabet the bucket entries PF ahead too (from the symbol
   fetched earlier), but never the slot written (that would load B[c] early and stall). */
SA_INLINE int32_t induce_run(const void *restrict T, int w, int32_t *restrict SA, int32_t n,
                             int32_t *restrict B, int32_t *restrict G, int bs, int pass, int big, int helped,
                             int32_t kb, int32_t ke, int32_t d) {
    const int left = pass == PASS_L1 || pass == PASS_L3 || pass == PASS_L1M;
    const int32_t step = left ? 1 : -1;
    const char *Tb = (const char *)T;
    int32_t i = left ? kb : n - 1 - kb, k = kb;
    for (; k < ke - 2 * PF; k++, i += step) {
        int32_t qf = pred_of(SA[i + 2 * PF * step], pass);
        SA_PREFETCH_R(Tb + (size_t)w * (size_t)(qf > 0 ? qf - 1 : 0));
        if (big) {
            int32_t qb = pred_of(SA[i + PF * step], pass);
            uint32_t cb = sym(T, w, qb > 0 ? qb : 0);
            SA_PREFETCH_W(&B[(size_t)cb * (size_t)bs]);
            if (pass == PASS_L1M || pass == PASS_S1M) SA_PREFETCH_W(&G[(size_t)cb * (size_t)bs]);
        }
        int32_t v = SA[i], q = pred_of(v, pass);
        d = induce_put(SA, B, G, bs, pass, helped, i, v, q, q >= 0 ? pred_info(T, w, q, pass) : 0, d);
    }
    for (; k < ke; k++, i += step) {
        int32_t v = SA[i], q = pred_of(v, pass);
        d = induce_put(SA, B, G, bs, pass, helped, i, v, q, q >= 0 ? pred_info(T, w, q, pass) : 0, d);
    }
    return d;
}

/* One induction pass over SA, left to right for L passes, right to left for S passes.
   The scan visits suffixes in sorted order, so the symbols it reads are at random text
   positions: prefetch them PF entries ahead. With a large alphabet (the reduced problems) the
   bucket pointers and the slots written are random too, so there the pipeline is 3 deep: the
   symbol at 3*PF, its bucket pointer at 2*PF, the slot to write at PF. Look-ahead entries
   that are not final yet only cost a useless prefetch. G (naming mode only) holds, per
   bucket, the group count d of the source of the entry last induced into it (-1: none).
   With a helper thread (see above) blocks it has cached take their symbols from the cache. */
SA_INLINE void induce(const void *restrict T, int w, int32_t *restrict SA, int32_t n,
                      int32_t *restrict B, int32_t *restrict G, int bs, int32_t K, int pass, par_cfg par,
                      ig_sais_progress_fn done, void *done_ctx, int32_t done_every) {
    const int left = pass == PASS_L1 || pass == PASS_L3 || pass == PASS_L1M, big = K > BIG_K;
    const int32_t step = left ? 1 : -1;
    const char *Tb = (const char *)T;
    int32_t d = 0; /* group boundaries crossed (naming mode) */
    if (left) { /* n-1 is induced by the virtual sentinel, which sorts first */
        int32_t q = n - 1;
        uint32_t c = sym(T, w, q);
        int pred_s = sym(T, w, q - 1) < c;
        if (pass == PASS_L1M) {
            SA[BK(c)++] = q | MARK | (pred_s ? INT32_MIN : 0); /* the sentinel's group is d = 0 */
            GK(c) = 0;
        } else {
            SA[BK(c)++] = pass == PASS_L1 ? (pred_s ? -q : q) : (pred_s ? ~q : q);
        }
    }
    if ((pass == PASS_L1 || pass == PASS_S1 || pass == PASS_L3 || pass == PASS_S3) && pb_enabled(par, n) &&
        induce_blocks(T, w, SA, n, B, K, pass, par, done, done_ctx, done_every) == 0)
        return;
    helper h;
    pthread_t th;
    const int helped = helper_start(&h, &th, par, T, w, SA, n, pass);
    const int32_t blk = helped ? h.blk : n;
    int helping = helped;
    int64_t last_done = n; /* progress reports (stage 3, top level): SA[last_done..n) told */
    int32_t next_done = done && done_every < n ? done_every : n;
    int32_t offered = 0, missed = 0; /* helper blocks reached, and how many were not ready */
    for (int32_t k0 = 0, b = 0; k0 < n; k0 += blk, b++) {
        const int32_t k1 = n - k0 < blk ? n : k0 + blk;
        const uint64_t *cache = NULL;
        if (helping) {
            __atomic_store_n(&h.main_at, b, __ATOMIC_RELEASE);
            if (HELPER_SHARE(b)) {
                offered++;
                if (__atomic_load_n(&h.ready[b % RING], __ATOMIC_ACQUIRE) == b)
                    cache = h.ring + (size_t)(b % RING) * (size_t)blk - k0; /* indexed by k */
                else
                    missed++;
                /* a helper that finishes less than half of its blocks has no CPU of its own
                   (a busy machine): it would only take time from this thread, so stop it */
                if (offered >= 48 && 2 * missed > offered) {
                    __atomic_store_n(&h.stop, 1, __ATOMIC_RELEASE);
                    helping = 0;
                }
            }
        }
        if (!cache) { /* the tight loop, cut where progress is reported */
            for (int32_t k = k0; k < k1;) {
                if (pass == PASS_S3 && done && k == next_done) { /* SA[n-k .. n) is final */
                    done(done_ctx, (int64_t)n - k, last_done);
                    last_done = (int64_t)n - k;
                    next_done = next_done > n - done_every ? n : next_done + done_every;
                }
                int32_t ke = pass == PASS_S3 && done && next_done < k1 ? next_done : k1;
                d = induce_run(T, w, SA, n, B, G, bs, pass, big, helped, k, ke, d);
                k = ke;
            }
            continue;
        }
        for (int32_t k = k0, i = left ? k0 : n - 1 - k0; k < k1; k++, i += step) {
            if (pass == PASS_S3 && done && k == next_done) { /* SA[i+1 .. n) is final */
                done(done_ctx, (int64_t)i + 1, last_done);
                last_done = (int64_t)i + 1;
                next_done = next_done > n - done_every ? n : next_done + done_every;
            }
            if (cache) { /* symbols are cached; fetch ahead what is not */
                if (k < k1 - PF) {
                    int32_t vf = SA[i + PF * step];
                    if ((uint32_t)(cache[k + PF] >> 32) != (uint32_t)vf) {
                        int32_t qf = pred_of(vf, pass);
                        SA_PREFETCH_R(Tb + (size_t)w * (size_t)(qf > 0 ? qf - 1 : 0));
                    } else if (big) {
                        SA_PREFETCH_W(SA + BK((uint32_t)cache[k + PF] >> 1));
                    }
                }
                if (big && k < k1 - 2 * PF) {
                    uint32_t c2 = (uint32_t)cache[k + 2 * PF] >> 1;
                    if (c2 < (uint32_t)K) {
                        SA_PREFETCH_R(&BK(c2));
                        if (pass == PASS_L1M || pass == PASS_S1M) SA_PREFETCH_R(&GK(c2));
                    }
                }
            } else if (!big) {
                if (k < n - PF) {
                    int32_t qf = pred_of(SA[i + PF * step], pass);
                    SA_PREFETCH_R(Tb + (size_t)w * (size_t)(qf > 0 ? qf - 1 : 0));
                }
            } else {
#if BIG_PIPE == 3
                if (k < n - 3 * PF) {
                    int32_t qf = pred_of(SA[i + 3 * PF * step], pass);
                    SA_PREFETCH_R(Tb + (size_t)w * (size_t)(qf > 0 ? qf - 1 : 0));
                }
                if (k < n - 2 * PF) {
                    int32_t qf = pred_of(SA[i + 2 * PF * step], pass);
                    uint32_t c2 = sym(T, w, qf > 0 ? qf : 0);
                    SA_PREFETCH_R(&BK(c2));
                    if (pass == PASS_L1M || pass == PASS_S1M) SA_PREFETCH_R(&GK(c2));
                }
                if (k < n - PF) {
                    int32_t qf = pred_of(SA[i + PF * step], pass);
                    SA_PREFETCH_W(SA + BK(sym(T, w, qf > 0 ? qf : 0)));
                }
#else
                if (k < n - 2 * PF) {
                    int32_t qf = pred_of(SA[i + 2 * PF * step], pass);
                    SA_PREFETCH_R(Tb + (size_t)w * (size_t)(qf > 0 ? qf - 1 : 0));
                }
                if (k < n - PF) {
                    int32_t qf = pred_of(SA[i + PF * step], pass);
                    uint32_t c2 = sym(T, w, qf > 0 ? qf : 0);
                    SA_PREFETCH_W(&BK(c2));
                    if (pass == PASS_L1M || pass == PASS_S1M) SA_PREFETCH_W(&GK(c2));
                }
#endif
            }
            int32_t v = SA[i], q = pred_of(v, pass); /* (only this thread writes SA) */
            uint32_t info = 0;
            if (q >= 0)
                info = cache && (uint32_t)(cache[k] >> 32) == (uint32_t)v ? (uint32_t)cache[k]
                                                                           : pred_info(T, w, q, pass);
            d = induce_put(SA, B, G, bs, pass, helped, i, v, q, info, d);
        }
    }
    if (helped) helper_stop(&h, th);
    if (pass == PASS_S3 && done && last_done > 0) done(done_ctx, 0, last_done);
}

/* ---- naming ------------------------------------------------------------------------------- */

/* SA[0..n1) holds the LMS positions sorted by LMS substring. Give each a 1-based name (equal
   substrings share one) stored at SA[n1 + p/2]; returns the number of distinct names. */
SA_INLINE int32_t name_lms(const void *restrict T, int w, int32_t *restrict SA, int32_t n,
                           int32_t n1) {
    int32_t *slot = SA + n1;
    memset(slot, 0, (size_t)(n - n1) * sizeof(int32_t));
    lms_scan(T, w, n, LMS_LEN, SA, NULL, 0, n1);
    int32_t name = 0, prev = 0, plen = 0;
    for (int32_t i = 0; i < n1; i++) {
        if (i < n1 - PF) { /* sorted order = random text positions: fetch ahead */
            int32_t pf = SA[i + PF];
            SA_PREFETCH_W(slot + (pf >> 1));
            SA_PREFETCH_R((const char *)T + (size_t)w * pf);
        }
        int32_t p = SA[i], len = slot[p >> 1];
        /* equal length and symbols imply equal types; the one reaching the sentinel is unique */
        int diff = len != plen || (int64_t)p + len > n || (int64_t)prev + len > n;
        for (int32_t k = 0; !diff && k < len; k++) diff = sym(T, w, p + k) != sym(T, w, prev + k);
        name += diff;
        slot[p >> 1] = name;
        prev = p;
        plen = len;
    }
    return name;
}

/* Two halves of a pass over SA on two threads (the second one a helper thread) when the
   helper policy allows: these loops are bound by random writes or reads, which two cores
   overlap. Each half is one contiguous range. */
typedef struct {
    int32_t *SA;
    const int32_t *src; /* unmap: the LMS positions in text order */
    int32_t n, n1;
    int32_t mid, names_before_mid; /* naming: marks in SA[0..mid) */
} halves;

static int par_halves(int64_t n_items, par_cfg par, ig_work_fn fn, void *ctx) {
    int threads = par.helper && n_items >= par.min_n ? 2 : 1;
    return ig_parallel_for(n_items, threads, (n_items + threads - 1) / threads, fn, ctx);
}

/* Naming mode, SA[b..e): each LMS position gets the count of marks up to its own. */
static int name_marked_range(void *ctx, int tid, int64_t b, int64_t e) {
    halves *h = (halves *)ctx;
    int32_t *restrict SA = h->SA, *restrict slot = h->SA + h->n1;
    int32_t name = b == 0 ? 0 : h->names_before_mid; /* (b is 0 or mid) */
    (void)tid;
    for (int32_t i = (int32_t)b; i < (int32_t)e; i++) {
        if (i < (int32_t)e - PF) SA_PREFETCH_W(slot + ((SA[i + PF] & VMASK) >> 1));
        int32_t v = SA[i], p = v & VMASK;
        name += (v >> 30) & 1;
        SA[i] = p;
        slot[p >> 1] = name;
    }
    return 0;
}

/* Naming mode: SA[0..n1) holds the sorted LMS positions with bit 30 set where a new LMS
   substring starts (see compact_marked). Same output as name_lms, no text access. */
static int32_t name_marked(int32_t *restrict SA, int32_t n, int32_t n1, par_cfg par) {
    memset(SA + n1, 0, (size_t)(n - n1) * sizeof(int32_t));
    int32_t before = 0, total, mid = n1 - n1 / 2; /* (where par_halves cuts) */
    for (int32_t i = 0; i < mid; i++) before += (SA[i] >> 30) & 1;
    total = before;
    for (int32_t i = mid; i < n1; i++) total += (SA[i] >> 30) & 1;
    halves h = {SA, NULL, n, n1, mid, before};
    (void)par_halves(n1, par, name_marked_range, &h);
    return total;
}

/* SA[i] := src[SA[i]] for i in [b, e): from ranks of the reduced problem to text positions. */
static int unmap_range(void *ctx, int tid, int64_t b, int64_t e) {
    halves *h = (halves *)ctx;
    int32_t *restrict SA = h->SA;
    const int32_t *restrict src = h->src;
    (void)tid;
    for (int32_t i = (int32_t)b; i < (int32_t)e; i++) {
        if (i < (int32_t)e - PF) SA_PREFETCH_R(src + SA[i + PF]);
        SA[i] = src[SA[i]];
    }
    return 0;
}

/* After PASS_S1M exactly the LMS entries have bit 31 set. Move them to SA[0..n1) in order,
   each marked iff some slot since the previous one (its own included) is marked. Branch-free:
   j <= i. */
static void compact_marked(int32_t *SA, int32_t n) {
    int32_t j = 0, pend = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = SA[i], keep = v < 0;
        pend |= v & MARK;
        SA[j] = (v & VMASK) | pend;
        j += keep;
        pend &= keep - 1; /* reset after a kept entry */
    }
}

/* ---- one level ---------------------------------------------------------------------------- */

SA_NOINLINE int sais_w4(const uint32_t *T, int32_t *SA, int32_t n, int32_t K, workspace ws);

/* Suffix array of T[0..n) (n >= 2, symbols < K), using ws for bucket memory. */
SA_INLINE int sais_level(const void *T, int w, int32_t *SA, int32_t n, int32_t K, workspace ws) {
    buckets bk;
    sa_clock t = {0, 0, 0};
    if (ws.tm.on) t = sa_now();
    int rc = buckets_init(&bk, T, w, n, K, ws);
    if (rc) return rc;
    par_cfg par = ws.par; /* (par.blocks is turned off for PASS_S3 when S parts stay uncleared) */
    const int marked = bk.A && (int64_t)n < MARK_LIMIT && ws.plain != 2;

    /* Stage 1: sort the LMS substrings. */
    bucket_bounds(T, w, n, &bk, 1);
    memset(SA, 0, (size_t)n * sizeof(int32_t));
    int32_t n1 = lms_scan(T, w, n, LMS_SEED, SA, bk.B, K, 0);
    sa_step(&ws.tm, &t, "count, seed LMS", n, K);
    if (n1 > 0) {
        int32_t K1;
        if (marked) {
            /* the seeds of a bucket are one group (their key is the symbol): mark the first */
            int32_t end = 0;
            for (int32_t c = 0; c < K; c++) {
                end += bk.C[c];
                if (bk.B[c] != end) SA[bk.B[c]] |= MARK;
                bk.A[c] = -1;
            }
            /* a large alphabet: each induced entry reads and writes B[c] and A[c] at random;
               side by side in one array they share a cache line (one miss, not two) */
            int own_bg = 0;
            int32_t *bg = K > BIG_K ? scratch_after(&bk, ws, 2 * (int64_t)K, &own_bg) : NULL;
            bucket_bounds(T, w, n, &bk, 0);
            if (bg) interleave(bg, bk.B, K);
            induce(T, w, SA, n, bg ? bg : bk.B, bg ? bg + 1 : bk.A, bg ? 2 : 1, K, PASS_L1M, ws.par, NULL, NULL, 0);
            sa_step(&ws.tm, &t, "stage 1 L pass", n, K);
            bucket_bounds(T, w, n, &bk, 1);
            for (int32_t c = 0; c < K; c++) bk.A[c] = -1;
            if (bg) interleave(bg, bk.B, K);
            induce(T, w, SA, n, bg ? bg : bk.B, bg ? bg + 1 : bk.A, bg ? 2 : 1, K, PASS_S1M, ws.par, NULL, NULL, 0);
            if (own_bg) free(bg);
            sa_step(&ws.tm, &t, "stage 1 S pass", n, K);
            compact_marked(SA, n);
            K1 = name_marked(SA, n, n1, ws.par);
            sa_step(&ws.tm, &t, "compact, name (marks)", n1, K1);
        } else {
            bucket_bounds(T, w, n, &bk, 0);
            induce(T, w, SA, n, bk.B, NULL, 1, K, PASS_L1, par, NULL, NULL, 0);
            bucket_bounds(T, w, n, &bk, 1);
            induce(T, w, SA, n, bk.B, NULL, 1, K, PASS_S1, par, NULL, NULL, 0);
            sa_step(&ws.tm, &t, "stage 1 L+S passes", n, K);
            int32_t j = 0; /* compact the (negated) LMS entries, branch-free: j <= i */
            for (int32_t i = 0; i < n; i++) {
                int32_t v = SA[i];
                SA[j] = -v;
                j += v < 0;
            }
            K1 = name_lms(T, w, SA, n, n1);
            sa_step(&ws.tm, &t, "compact, name (compare)", n1, K1);
        }

        /* Stage 2: recurse when names repeat, else SA[0..n1) is already sorted. */
        if (K1 < n1) {
            int32_t *s1 = SA + n - n1;
            int32_t j = n; /* gather the names in text order into s1, branch-free: j > i */
            for (int32_t i = n - 1; i >= n1; i--) {
                int32_t v = SA[i];
                SA[j - 1] = v - 1;
                j -= v != 0;
            }
            /* keep peak memory to one level: large bucket arrays go, small ones stay */
            if ((bk.own_B | bk.own_C | bk.own_A) && K > BIG_K) buckets_free(&bk);
            workspace sub = {SA + n1, (int64_t)n - 2 * (int64_t)n1, ws.budget, ws.plain, ws.par, NULL, NULL, 0,
                             {ws.tm.on, ws.tm.level + 1}};
            sa_step(&ws.tm, &t, "gather reduced string", n1, K1);
            rc = sais_w4((const uint32_t *)s1, SA, n1, K1, sub);
            if (ws.tm.on) t = sa_now();
            if (rc) {
                buckets_free(&bk);
                return rc;
            }
            if (!bk.B && (rc = buckets_init(&bk, T, w, n, K, ws))) return rc;
            /* s1 := LMS positions in text order (and their counts per symbol into A) */
            lms_scan(T, w, n, LMS_LIST, SA, bk.A, K, n1);
            halves h = {SA, s1, n, n1, 0, 0};
            (void)par_halves(n1, ws.par, unmap_range, &h);
            sa_step(&ws.tm, &t, "list LMS, unmap", n1, K1);
        } else if (bk.A) {
            lms_scan(T, w, n, LMS_COUNT, SA, bk.A, K, n1);
        }
    }

    /* Stage 3: place the sorted LMS suffixes at their bucket ends and induce the rest. */
    bucket_bounds(T, w, n, &bk, 1);
    memset(SA + n1, 0, (size_t)(n - n1) * sizeof(int32_t));
    if (bk.A && n1 > 0) {
        /* sorted LMS suffixes come by symbol: A[c] of them for symbol c, no text access */
        int32_t i = n1 - 1;
        for (int32_t c = K - 1; c >= 0 && i >= 0; c--) {
            int32_t *b = bk.B + c;
            for (int32_t m = bk.A[c]; m > 0; m--, i--) {
                int32_t p = SA[i];
                SA[i] = 0;
                SA[--*b] = p;
            }
        }
    } else {
        for (int32_t i = n1 - 1; i >= 0; i--) {
            if (i >= 2 * PF) SA_PREFETCH_R((const char *)T + (size_t)w * SA[i - 2 * PF]);
            if (K > BIG_K && i >= PF) SA_PREFETCH_W(bk.B + sym(T, w, SA[i - PF]));
            int32_t p = SA[i];
            SA[i] = 0;
            SA[--bk.B[sym(T, w, p)]] = p;
        }
    }
    sa_step(&ws.tm, &t, "stage 3 placement", n1, K);
    bucket_bounds(T, w, n, &bk, 0);
    induce(T, w, SA, n, bk.B, NULL, 1, K, PASS_L3, par, NULL, NULL, 0);
    sa_step(&ws.tm, &t, "stage 3 L pass", n, K);
    if (pb_enabled(par, n) && bk.C) {
        /* B[c] now ends bucket c's L part: clear its S part (LMS entries the S pass rewrites
           before reading) so that the S pass can run block-parallel (see induce_blocks) */
        int64_t end = 0;
        for (int32_t c = 0; c < K; c++) {
            end += bk.C[c];
            memset(SA + bk.B[c], 0, (size_t)(end - bk.B[c]) * sizeof(int32_t));
        }
    } else {
        par.blocks = 0;
    }
    bucket_bounds(T, w, n, &bk, 1);
    induce(T, w, SA, n, bk.B, NULL, 1, K, PASS_S3, par, ws.done, ws.done_ctx, ws.done_every);
    sa_step(&ws.tm, &t, "stage 3 S pass", n, K);
    buckets_free(&bk);
    return 0;
}

/* The top level has no free SA space; all levels may malloc up to max(n/2, 2^17) int32.
   mode (tests): 0 normal, 1/2 fallbacks (see workspace), 3 a second thread on every pass with
   tiny blocks (block-parallel plain passes, the helper for the naming ones), 4 = 2 and 3 (plain
   stage-1 passes, block-parallel). INFINIGRAM_SAIS_THREADS=1 / =2 in the environment turns the helper off / on
   whatever the load. */
static workspace top_workspace(int32_t n, int mode, ig_sais_progress_fn done, void *done_ctx) {
    workspace ws = {NULL, 0, n / 2 > (1 << 17) ? n / 2 : (1 << 17), mode == 1 || mode == 2 ? mode : mode == 4 ? 2 : 0,
                    {0, (int32_t)1 << 20, (int32_t)1 << 13, (int32_t)1 << 16, (int32_t)1 << 11, 1},
                    done, done_ctx, (int32_t)1 << 22, {0, 0}};
    const char *timing = getenv("INFINIGRAM_BUILD_TIMING");
    ws.tm.on = timing && *timing;
    const char *env = getenv("INFINIGRAM_SAIS_THREADS");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double load = 0;
    /* a helper pays off on an idle CPU; on a machine already busy (load average, which counts
       this thread, within half a CPU of the count) it would only compete with this thread */
    if (getloadavg(&load, 1) != 1) load = 0;
    ws.par.helper = cpus > 1 && load < (double)cpus - 0.5;
    if (env && env[0] && !env[1]) ws.par.helper = env[0] == '2' ? 1 : env[0] == '1' ? 0 : ws.par.helper;
    if (mode == 3 || mode == 4) {
        ws.par.helper = 1;
        ws.par.min_n = 2;
        ws.par.blk = 64;
        ws.par.pblk = 16 + (int32_t)(n % 7); /* tiny blocks, halves of uneven sizes */
        ws.par.pmin = 2;
        ws.done_every = 100;
    }
    return ws;
}

SA_NOINLINE int sais_w1(const uint8_t *T, int32_t *SA, int32_t n, int32_t K, workspace ws) {
    return sais_level(T, 1, SA, n, K, ws);
}

SA_NOINLINE int sais_w2(const uint16_t *T, int32_t *SA, int32_t n, int32_t K, workspace ws) {
    return sais_level(T, 2, SA, n, K, ws);
}

SA_NOINLINE int sais_w4(const uint32_t *T, int32_t *SA, int32_t n, int32_t K, workspace ws) {
    return sais_level(T, 4, SA, n, K, ws);
}

/* ---- entry points ------------------------------------------------------------------------- */

/* Checks the arguments; on success *ke = largest symbol + 1. Returns 1 when there is nothing
   left to do (n <= 1, SA already filled), 0 to go on, or an error code. */
SA_INLINE int check_args(const void *T, int w, int32_t *SA, int64_t n, uint32_t K, uint32_t *ke) {
    if (!T || !SA || n < 0 || n > INT32_MAX - 1) return IG_ERR_ARG;
    uint32_t mx = 0;
    for (int32_t i = 0; i < (int32_t)n; i++) {
        uint32_t c = sym(T, w, i);
        mx = c > mx ? c : mx;
    }
    if (n > 0 && mx >= K) return IG_ERR_ARG;
    if (n == 1) SA[0] = 0;
    *ke = mx + 1;
    hint_hugepages(SA, (size_t)n * sizeof(int32_t), 0);
    hint_hugepages(T, (size_t)n * (size_t)w, 1);
    return n <= 1;
}

/* Replace the symbols of T by their ranks among the distinct symbols (order preserving), into a
   new array: indices are radix sorted by symbol (two 16-bit passes, SA and the output array as
   the two buffers), then ranks are assigned in sorted order. */
static uint32_t *remap_dense(const uint32_t *T, int32_t *SA, int32_t n, uint32_t *kout) {
    uint32_t *R = (uint32_t *)malloc((size_t)n * sizeof(uint32_t));
    int32_t *cnt = (int32_t *)malloc(65536 * sizeof(int32_t));
    if (!R || !cnt) {
        free(R);
        free(cnt);
        return NULL;
    }
    hint_hugepages(R, (size_t)n * sizeof(uint32_t), 0);
    for (int pass = 0; pass < 2; pass++) {
        int sh = 16 * pass;
        memset(cnt, 0, 65536 * sizeof(int32_t));
        for (int32_t i = 0; i < n; i++) cnt[(T[i] >> sh) & 0xFFFF]++;
        int32_t sum = 0;
        for (int c = 0; c < 65536; c++) {
            int32_t x = cnt[c];
            cnt[c] = sum;
            sum += x;
        }
        if (pass == 0) {
            for (int32_t i = 0; i < n; i++) R[cnt[T[i] & 0xFFFF]++] = (uint32_t)i;
        } else {
            for (int32_t k = 0; k < n; k++) {
                uint32_t i = R[k];
                SA[cnt[T[i] >> 16]++] = (int32_t)i;
            }
        }
    }
    free(cnt);
    uint32_t rank = 0, prev = T[SA[0]];
    for (int32_t k = 0; k < n; k++) {
        uint32_t c = T[SA[k]];
        rank += c != prev;
        prev = c;
        R[SA[k]] = rank;
    }
    *kout = rank + 1;
    return R;
}

/* Any width: check, remap a sparse u32 alphabet, sort, report (see ig_sais_final). */
static int sais_any(const void *T, int w, int32_t *SA, int64_t n, uint32_t K, int mode, ig_sais_progress_fn done,
                    void *done_ctx) {
    uint32_t ke;
    int rc = check_args(T, w, SA, n, K, &ke);
    if (rc) {
        if (rc > 0 && n > 0 && done) done(done_ctx, 0, n);
        return rc > 0 ? 0 : rc;
    }
    workspace ws = top_workspace((int32_t)n, mode, done, done_ctx);
    if (w == 1) return sais_w1((const uint8_t *)T, SA, (int32_t)n, (int32_t)ke, ws);
    if (w == 2) return sais_w2((const uint16_t *)T, SA, (int32_t)n, (int32_t)ke, ws);
    /* ke may be 0 (wrapped: symbol 2^32-1) or far above n: sort over dense ranks instead so
       the bucket arrays stay O(n). */
    if (ke == 0 || (ke > (uint32_t)n && ke > 65536)) {
        uint32_t *R = remap_dense((const uint32_t *)T, SA, (int32_t)n, &ke);
        if (!R) return IG_ERR_NOMEM;
        rc = sais_w4(R, SA, (int32_t)n, (int32_t)ke, ws);
        free(R);
        return rc;
    }
    return sais_w4((const uint32_t *)T, SA, (int32_t)n, (int32_t)ke, ws);
}

int ig_sais_u8(const uint8_t *T, int32_t *SA, int64_t n, uint32_t K) { return sais_any(T, 1, SA, n, K, 0, NULL, NULL); }
int ig_sais_u16(const uint16_t *T, int32_t *SA, int64_t n, uint32_t K) { return sais_any(T, 2, SA, n, K, 0, NULL, NULL); }
int ig_sais_u32(const uint32_t *T, int32_t *SA, int64_t n, uint32_t K) { return sais_any(T, 4, SA, n, K, 0, NULL, NULL); }

int ig_sais_final(const void *T, int w, int32_t *SA, int64_t n, uint32_t K, ig_sais_progress_fn done, void *ctx) {
    if (w != 1 && w != 2 && w != 4) return IG_ERR_ARG;
    return sais_any(T, w, SA, n, K, 0, done, ctx);
}

int ig_sais_mode(const void *T, int w, int32_t *SA, int64_t n, uint32_t K, int mode, ig_sais_progress_fn done,
                 void *ctx) {
    if (w != 1 && w != 2 && w != 4) return IG_ERR_ARG;
    return sais_any(T, w, SA, n, K, mode, done, ctx);
}
