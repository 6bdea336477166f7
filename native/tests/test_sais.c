/* test_sais.c - standalone tests for native/src/sais.c.
 *
 *   gcc -O2 -Inative/include -Inative/src native/src/sais.c native/tests/test_sais.c -o /tmp/test_sais
 *   /tmp/test_sais            (also worth running built with -fsanitize=address,undefined -g)
 *
 * Small inputs are checked against a naive reference (qsort of suffixes); larger ones with an
 * exact linear-time checker (SA is a permutation and consecutive suffixes are ordered, using
 * the inverse SA for everything after the first symbol). Each run is done for every symbol
 * width that can hold the text, with guard words around SA to catch stray writes.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sais.h"

static int failures = 0, checks = 0;

#define FAIL(...)                                                    \
    do {                                                             \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
        fprintf(stderr, __VA_ARGS__);                                \
        fputc('\n', stderr);                                         \
        failures++;                                                  \
    } while (0)

/* xorshift64* */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* ---- references ---------------------------------------------------------------------------- */

static const uint32_t *ref_T; /* test-only globals for the qsort comparator */
static int64_t ref_n;

static int cmp_suffix(const void *a, const void *b) {
    int64_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    while (i < ref_n && j < ref_n) {
        if (ref_T[i] != ref_T[j]) return ref_T[i] < ref_T[j] ? -1 : 1;
        i++, j++;
    }
    return i == ref_n ? (j == ref_n ? 0 : -1) : 1; /* the shorter (a prefix) first */
}

static void naive_sa(const uint32_t *T, int64_t n, int32_t *SA) {
    for (int64_t i = 0; i < n; i++) SA[i] = (int32_t)i;
    ref_T = T;
    ref_n = n;
    qsort(SA, (size_t)n, sizeof(int32_t), cmp_suffix);
}

/* Exact O(n) check: SA is a permutation, and for each neighbour pair the first symbols are
   ordered and, when equal, the rest is ordered by the inverse SA (rank of position n = -1). */
static int check_sa(const uint32_t *T, int64_t n, const int32_t *SA) {
    int64_t *rank = malloc((size_t)(n + 1) * sizeof(int64_t));
    int ok = 1;
    for (int64_t i = 0; i <= n; i++) rank[i] = -2;
    for (int64_t i = 0; i < n && ok; i++) {
        if (SA[i] < 0 || SA[i] >= n || rank[SA[i]] != -2) ok = 0;
        else rank[SA[i]] = i;
    }
    rank[n] = -1;
    for (int64_t i = 0; i + 1 < n && ok; i++) {
        int64_t a = SA[i], b = SA[i + 1];
        if (T[a] > T[b] || (T[a] == T[b] && rank[a + 1] >= rank[b + 1])) ok = 0;
    }
    free(rank);
    return ok;
}

/* ---- running one text through every width -------------------------------------------------- */

#define GUARD 4
#define GUARD_VAL ((int32_t)0x5A5A5A5A)

/* Checks ig_sais_mode's progress reports: copies each reported range as it is then. */
typedef struct {
    int64_t next_hi; /* the next range must end here */
    int bad;
    const int32_t *SA;
    int32_t *snap;
} progress;

static void on_progress(void *ctx, int64_t lo, int64_t hi) {
    progress *p = ctx;
    if (hi != p->next_hi || lo >= hi || lo < 0) {
        p->bad = 1;
        return;
    }
    memcpy(p->snap + lo, p->SA + lo, (size_t)(hi - lo) * sizeof(int32_t));
    p->next_hi = lo;
}

/* Runs ig_sais_uW on T (as w-byte symbols), checks the result; expect_sa may be NULL. */
static void run_width(const uint32_t *T, int64_t n, uint32_t K, int w, const int32_t *expect,
                      const char *what, int fallback) {
    int32_t *buf = malloc((size_t)(n + 2 * GUARD) * sizeof(int32_t)), *SA = buf + GUARD;
    void *Tw = malloc((size_t)(n ? n : 1) * (size_t)w);
    for (int64_t i = 0; i < n + 2 * GUARD; i++) buf[i] = GUARD_VAL;
    for (int64_t i = 0; i < n; i++) {
        if (w == 1) ((uint8_t *)Tw)[i] = (uint8_t)T[i];
        if (w == 2) ((uint16_t *)Tw)[i] = (uint16_t)T[i];
        if (w == 4) ((uint32_t *)Tw)[i] = T[i];
    }
    progress pr = {n, 0, SA, malloc((size_t)(n ? n : 1) * sizeof(int32_t))};
    int rc = fallback ? ig_sais_mode(Tw, w, SA, n, K, fallback, on_progress, &pr)
           : w == 1 ? ig_sais_u8(Tw, SA, n, K) : w == 2 ? ig_sais_u16(Tw, SA, n, K) : ig_sais_u32(Tw, SA, n, K);
    checks++;
    /* progress reports: descending ranges covering [0, n), each final when reported */
    if (fallback && rc == 0 && (pr.bad || pr.next_hi != 0 || (n && memcmp(pr.snap, SA, (size_t)n * sizeof(int32_t)))))
        FAIL("%s: u%d n=%" PRId64 " fallback %d: progress reports wrong", what, 8 * w, n, fallback);
    free(pr.snap);
    if (rc != 0) {
        FAIL("%s: u%d n=%" PRId64 " K=%" PRIu32 " fallback %d returned %d", what, 8 * w, n, K, fallback, rc);
    } else {
        for (int g = 0; g < GUARD; g++)
            if (buf[g] != GUARD_VAL || SA[n + g] != GUARD_VAL) {
                FAIL("%s: u%d n=%" PRId64 ": write outside SA", what, 8 * w, n);
                break;
            }
        if (expect && n && memcmp(expect, SA, (size_t)n * sizeof(int32_t)))
            FAIL("%s: u%d n=%" PRId64 " K=%" PRIu32 " fallback %d: differs from naive", what, 8 * w, n, K, fallback);
        else if (!expect && !check_sa(T, n, SA))
            FAIL("%s: u%d n=%" PRId64 " K=%" PRIu32 " fallback %d: not a suffix array", what, 8 * w, n, K, fallback);
    }
    free(buf);
    free(Tw);
}

/* Checks T (symbols < K) with every width that holds K-1; naive reference when small. */
static void run_text(const uint32_t *T, int64_t n, uint32_t K, const char *what) {
    int32_t *expect = NULL;
    if (n <= 5000) {
        expect = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
        naive_sa(T, n, expect);
        if (!check_sa(T, n, expect)) FAIL("%s: checker disagrees with naive", what);
    }
    for (int w = 1; w <= 4; w *= 2) {
        if (w < 4 && ((uint64_t)K - 1) >> (8 * w)) continue; /* K-1 does not fit in w bytes */
        uint32_t Kw = K;
        run_width(T, n, Kw, w, expect, what, 0);
        /* a looser bound K must give the same answer */
        if (w < 4 && K < (1u << (8 * w))) run_width(T, n, 1u << (8 * w), w, expect, what, 0);
        if (w == 4 && K < UINT32_MAX) run_width(T, n, UINT32_MAX, w, expect, what, 0);
        /* the fallbacks (tight memory, texts of 2^30+ symbols) and the second thread must too
           (u32 always, the narrower widths, which share that code, in one case in three) */
        if (w == 4 || rnd() % 3 == 0) run_width(T, n, Kw, w, expect, what, 1 + (int)(rnd() % 4));
    }
    free(expect);
}

/* ---- test families ------------------------------------------------------------------------- */

static void test_random(void) {
    static const uint32_t alphabets[] = {1, 2, 3, 4, 255, 256, 65535, 65536};
    uint32_t *T = malloc(2001 * sizeof(uint32_t));
    for (size_t a = 0; a < sizeof alphabets / sizeof *alphabets; a++) {
        uint32_t K = alphabets[a];
        for (int rep = 0; rep < 60; rep++) {
            int64_t n = rep < 20 ? rep : (int64_t)(rnd() % 2001);
            for (int64_t i = 0; i < n; i++) T[i] = (uint32_t)(rnd() % K);
            if (n >= 2 && rep % 3 == 0) T[rnd() % n] = K - 1, T[rnd() % n] = 0;
            run_text(T, n, K, "random");
        }
    }
    free(T);
}

/* A few distinct symbols spread over [0, 2^32-1), forcing the dense remap in the u32 path. */
static void test_sparse_large(void) {
    uint32_t *T = malloc(2001 * sizeof(uint32_t)), pool[64];
    for (int rep = 0; rep < 200; rep++) {
        int m = 1 + (int)(rnd() % 64);
        for (int k = 0; k < m; k++) pool[k] = (uint32_t)rnd() % UINT32_MAX; /* < 2^32-1 */
        pool[0] = UINT32_MAX - 1;
        if (m > 1) pool[1] = 0;
        if (m > 2) pool[2] = 65536;
        int64_t n = rep < 10 ? rep : (int64_t)(rnd() % 2001);
        for (int64_t i = 0; i < n; i++) T[i] = pool[rnd() % m];
        run_text(T, n, UINT32_MAX, "sparse-large");
    }
    /* every symbol distinct (alphabet larger than n, and n > 65536 symbols in use) */
    int64_t n = 100000;
    uint32_t *U = malloc((size_t)n * sizeof(uint32_t));
    for (int64_t i = 0; i < n; i++) U[i] = (uint32_t)(((uint64_t)i * 2654435761u) % UINT32_MAX);
    run_text(U, n, UINT32_MAX, "distinct-large");
    /* 70000 symbols in use, max < n: no remap, large buckets */
    for (int64_t i = 0; i < n; i++) U[i] = (uint32_t)(rnd() % 70000);
    run_text(U, n, 70000, "wide-alphabet");
    free(U);
    free(T);
}

static void test_structured(void) {
    int64_t cap = 6000;
    uint32_t *T = malloc((size_t)cap * sizeof(uint32_t));
    static const uint32_t Ks[] = {1, 2, 3, 256, 65536, UINT32_MAX};
    for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++) {
        uint32_t K = Ks[k], hi = K - 1;
        static const int64_t lens[] = {0, 1, 2, 3, 4, 5, 7, 8, 16, 33, 1000, 4099};
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
            int64_t n = lens[l];
            for (int64_t i = 0; i < n; i++) T[i] = hi; /* all-equal run of the top symbol */
            run_text(T, n, K, "run-top");
            for (int64_t i = 0; i < n; i++) T[i] = 0;
            run_text(T, n, K, "run-zero");
            if (K < 2) continue;
            for (int64_t i = 0; i < n; i++) T[i] = i % 2 ? 0 : hi; /* abab... with extremes */
            run_text(T, n, K, "period-2");
            for (int64_t i = 0; i < n; i++) T[i] = i % 2 ? hi : 0;
            run_text(T, n, K, "period-2b");
            if (K < 3) continue;
            for (int64_t i = 0; i < n; i++) T[i] = i % 3 == 0 ? hi : i % 3 == 1 ? 0 : 1; /* abc.. */
            run_text(T, n, K, "period-3");
            for (int64_t i = 0; i < n; i++) T[i] = (uint32_t)(i % 3 == 0 ? 1 : i % 3 == 1 ? 0 : hi);
            run_text(T, n, K, "period-3b");
            for (int64_t i = 0; i < n; i++) T[i] = (uint32_t)(n - i) % 3; /* descending runs */
            run_text(T, n, K, "saw");
            for (int64_t i = 0; i < n; i++) T[i] = i < n / 2 ? hi : 0;
            run_text(T, n, K, "two-runs");
        }
        /* Fibonacci strings over {0, K-1} and {K-1, 0} */
        if (K >= 2) {
            for (int flip = 0; flip < 2; flip++) {
                uint32_t a = flip ? hi : 0, b = flip ? 0 : hi;
                int64_t la = 1, lb = 1;
                T[0] = a; /* F1 = "a", F2 = "ab": F(k) = F(k-1) F(k-2), built in place */
                T[1] = b;
                lb = 2;
                while (lb + la <= cap) {
                    memcpy(T + lb, T, (size_t)la * sizeof(uint32_t));
                    int64_t t = lb;
                    lb += la;
                    la = t;
                    run_text(T, lb, K, "fibonacci");
                }
            }
        }
    }
    free(T);
}

/* Larger inputs (linear checker only) that reach deep recursion and the fallback paths. */
static void test_large(void) {
    int64_t n = 300000;
    uint32_t *T = malloc((size_t)n * sizeof(uint32_t));
    static const uint32_t alphabets[] = {2, 4, 20, 256, 32000, 65536};
    for (size_t a = 0; a < sizeof alphabets / sizeof *alphabets; a++) {
        for (int64_t i = 0; i < n; i++) T[i] = (uint32_t)(rnd() % alphabets[a]);
        run_text(T, n, alphabets[a], "large-random");
    }
    /* x 0 y 0 z 0 ...: n1 = n/2 LMS positions, names repeat, no free SA space for buckets */
    for (int64_t i = 0; i < n; i++) T[i] = i % 2 ? 0 : 1 + (uint32_t)(rnd() % 5000);
    run_text(T, n, 5001, "alternating");
    /* repeated blocks with mutations: long equal LMS substrings, many recursion levels */
    for (int64_t i = 0; i < 1000; i++) T[i] = (uint32_t)(rnd() % 8);
    for (int64_t i = 1000; i < n; i++) T[i] = rnd() % 500 ? T[i - 1000] : (uint32_t)(rnd() % 8);
    run_text(T, n, 8, "repeats");
    free(T);
    /* alphabets and reduced alphabets beyond 2^17 symbols take the prefetch-pipelined paths */
    n = 1500000;
    T = malloc((size_t)n * sizeof(uint32_t));
    for (int64_t i = 0; i < n; i++) T[i] = (uint32_t)(rnd() % 65536); /* reduced K ~ 500k */
    run_text(T, n, 65536, "large-reduced-alphabet");
    for (int64_t i = 0; i < n; i++) T[i] = (uint32_t)(rnd() % 1000000); /* K <= n: no remap */
    run_text(T, n, 1000000, "large-alphabet");
    for (int64_t i = 0; i < n; i++) T[i] = i % 3 ? (uint32_t)(rnd() % 300000) : 7; /* repeats */
    for (int64_t i = 600000; i < n; i++) T[i] = T[i - 600000];
    run_text(T, n, 300000, "large-alphabet-repeats");
    /* Fibonacci over 2 symbols, large */
    int64_t la = 1, lb = 2;
    T[0] = 0, T[1] = 1;
    while (lb + la <= n) {
        memcpy(T + lb, T, (size_t)la * sizeof(uint32_t));
        int64_t t = lb;
        lb += la;
        la = t;
    }
    run_text(T, lb, 2, "large-fibonacci");
    free(T);
}

static void test_errors(void) {
    uint8_t t8[4] = {0, 1, 2, 3};
    uint16_t t16[4] = {0, 1, 65535, 3};
    uint32_t t32[4] = {0, 1, UINT32_MAX, 3};
    int32_t SA[8];
    int rc;
#define EXPECT(call, want)                                          \
    do {                                                            \
        checks++;                                                   \
        if ((rc = (call)) != (want)) FAIL("%s -> %d, want %d", #call, rc, want); \
    } while (0)
    EXPECT(ig_sais_u8(t8, SA, 4, 3), IG_ERR_ARG);          /* symbol 3 >= K */
    EXPECT(ig_sais_u8(t8, SA, 4, 4), 0);
    EXPECT(ig_sais_u8(t8, SA, 4, 0), IG_ERR_ARG);
    EXPECT(ig_sais_u16(t16, SA, 4, 65535), IG_ERR_ARG);
    EXPECT(ig_sais_u16(t16, SA, 4, 65536), 0);
    EXPECT(ig_sais_u32(t32, SA, 4, UINT32_MAX), IG_ERR_ARG);
    EXPECT(ig_sais_u32(t32, SA, 3, UINT32_MAX), IG_ERR_ARG);
    EXPECT(ig_sais_u32(t32, SA, 2, 2), 0);
    EXPECT(ig_sais_u32(t32, SA, 2, 1), IG_ERR_ARG);
    EXPECT(ig_sais_u8(NULL, SA, 4, 4), IG_ERR_ARG);
    EXPECT(ig_sais_u16(t16, NULL, 4, 65536), IG_ERR_ARG);
    EXPECT(ig_sais_u32(NULL, NULL, 0, 1), IG_ERR_ARG);
    EXPECT(ig_sais_u8(t8, SA, -1, 4), IG_ERR_ARG);
    EXPECT(ig_sais_u8(t8, SA, (int64_t)INT32_MAX, 4), IG_ERR_ARG);
    EXPECT(ig_sais_u16(t16, SA, (int64_t)1 << 40, 65536), IG_ERR_ARG);
    EXPECT(ig_sais_u32(t32, SA, 0, 0), 0);          /* empty text: any K */
    SA[0] = 7;
    EXPECT(ig_sais_u16(t16, SA, 1, 1), 0);
    checks++;
    if (SA[0] != 0) FAIL("n=1 gave SA[0]=%d", SA[0]);
    EXPECT(ig_sais_u16(t16 + 2, SA, 1, 65535), IG_ERR_ARG); /* single symbol >= K */
}

int main(void) {
    test_errors();
    test_random();
    test_sparse_large();
    test_structured();
    test_large();
    printf("test_sais: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
