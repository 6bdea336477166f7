/* bench_sais.c - throughput of ig_sais_* on synthetic tokens and on a real file.
 *
 *   gcc -O2 -pthread -Inative/include -Inative/src native/src/sais.c native/src/parallel.c \
 *       native/tests/bench_sais.c -o /tmp/bench_sais
 *   /tmp/bench_sais [n_tokens=50000000] [file ...]
 *
 * 1. n_tokens u16 tokens drawn i.i.d. from a Zipf(1.0) law over 32000 symbols (ids shuffled so
 *    frequent tokens are spread over the id range, as with a real tokenizer vocabulary);
 * 2. each file given: its bytes as u8 symbols, and its byte pairs as native-endian u16 tokens;
 *    a .npy file of u16 tokens (eval/corpora.py's format) instead: those tokens as u16, and as
 *    u32 tokens of a 4x larger vocabulary (id -> 4*id + 3, e.g. 128k ids for a 32k tokenizer:
 *    the u32 path of a vocabulary above 65,535). SAIS_BENCH_ONLY=u16 / =u32 runs one of them.
 * Prints wall-clock and CPU seconds and tokens/s (CPU time is the fairer figure on a shared,
 * busy machine); set SAIS_BENCH_CHECK=1 to also verify each result.
 */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sais.h"

static double now(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Exact linear check (see test_sais.c); returns 1 when SA is the suffix array of T. */
static int check_sa(const void *T, int w, int64_t n, const int32_t *SA) {
    int32_t *rank = malloc((size_t)(n + 1) * sizeof(int32_t));
    int ok = rank != NULL;
    for (int64_t i = 0; i <= n && ok; i++) rank[i] = -2;
    for (int64_t i = 0; i < n && ok; i++) {
        if (SA[i] < 0 || SA[i] >= n || rank[SA[i]] != -2) ok = 0;
        else rank[SA[i]] = (int32_t)i;
    }
    if (ok) rank[n] = -1;
    for (int64_t i = 0; i + 1 < n && ok; i++) {
        int64_t a = SA[i], b = SA[i + 1];
        uint32_t x = w == 1 ? ((const uint8_t *)T)[a] : w == 2 ? ((const uint16_t *)T)[a] : ((const uint32_t *)T)[a];
        uint32_t y = w == 1 ? ((const uint8_t *)T)[b] : w == 2 ? ((const uint16_t *)T)[b] : ((const uint32_t *)T)[b];
        if (x > y || (x == y && rank[a + 1] >= rank[b + 1])) ok = 0;
    }
    free(rank);
    return ok;
}

static void bench(const char *what, const void *T, int w, int64_t n, uint32_t K) {
    int32_t *SA = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!SA) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    int rc = w == 1 ? ig_sais_u8(T, SA, n, K) : w == 2 ? ig_sais_u16(T, SA, n, K) : ig_sais_u32(T, SA, n, K);
    double dt = now(CLOCK_MONOTONIC) - t0, dc = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    printf("%-28s n=%10lld rc=%d  wall %6.2f s %6.2f M tok/s  cpu %6.2f s %6.2f M tok/s", what,
           (long long)n, rc, dt, (double)n / dt / 1e6, dc, (double)n / dc / 1e6);
    const char *chk = getenv("SAIS_BENCH_CHECK");
    if (chk && *chk && *chk != '0') printf("  check=%s", check_sa(T, w, n, SA) ? "ok" : "WRONG");
    printf("\n");
    fflush(stdout);
    free(SA);
}

/* A .npy file of little-endian u16 tokens (version 1 header): u16, then widened to u32. */
static void bench_npy(const char *base, const uint8_t *buf, size_t got) {
    if (got < 10 || memcmp(buf, "\x93NUMPY", 6) || !strstr((const char *)buf + 10, "'<u2'")) {
        fprintf(stderr, "%s: not a .npy file of <u2 tokens\n", base);
        return;
    }
    size_t hdr = 10 + (size_t)(buf[8] | buf[9] << 8), n = (got - hdr) / 2;
    const char *only = getenv("SAIS_BENCH_ONLY");
    uint16_t *t16 = malloc((n ? n : 1) * sizeof(uint16_t));
    memcpy(t16, buf + hdr, n * 2);
    char label[64];
    if (!only || !strcmp(only, "u16")) {
        snprintf(label, sizeof label, "u16 %.20s", base);
        bench(label, t16, 2, (int64_t)n, 65536);
    }
    if (!only || !strcmp(only, "u32")) {
        uint32_t *t32 = malloc((n ? n : 1) * sizeof(uint32_t));
        for (size_t i = 0; i < n; i++) t32[i] = 4u * t16[i] + 3u;
        snprintf(label, sizeof label, "u32 (4*id+3) %.14s", base);
        bench(label, t32, 4, (int64_t)n, 4u * 65536u);
        free(t32);
    }
    free(t16);
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 50000000;
    const uint32_t V = 32000;

    /* Zipf(1.0) CDF over ranks, and a shuffled rank -> id map */
    double *cdf = malloc(V * sizeof(double));
    uint16_t *id = malloc(V * sizeof(uint16_t));
    double z = 0;
    for (uint32_t r = 0; r < V; r++) z += 1.0 / (r + 1.0);
    double acc = 0;
    for (uint32_t r = 0; r < V; r++) {
        acc += 1.0 / (r + 1.0) / z;
        cdf[r] = acc;
        id[r] = (uint16_t)r;
    }
    for (uint32_t r = V - 1; r > 0; r--) {
        uint32_t j = (uint32_t)(rnd() % (r + 1));
        uint16_t t = id[r];
        id[r] = id[j];
        id[j] = t;
    }
    uint16_t *T = malloc((size_t)(n ? n : 1) * sizeof(uint16_t));
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(rnd() >> 11) * (1.0 / 9007199254740992.0);
        uint32_t lo = 0, hi = V - 1;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        T[i] = id[lo];
    }
    bench("zipf u16 (V=32000)", T, 2, n, V);
    free(T);
    free(cdf);
    free(id);

    if (argc < 3) printf("(pass file paths after n_tokens to also time real data)\n");
    for (int a = 2; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        if (!f) {
            perror(argv[a]);
            continue;
        }
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc((size_t)(sz > 0 ? sz : 1));
        size_t got = fread(buf, 1, (size_t)sz, f);
        fclose(f);
        char label[64];
        const char *base = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        size_t blen = strlen(base);
        if (blen > 4 && !strcmp(base + blen - 4, ".npy")) {
            bench_npy(base, buf, got);
            free(buf);
            continue;
        }
        snprintf(label, sizeof label, "bytes u8 of %.14s", base);
        bench(label, buf, 1, (int64_t)got, 256);
        uint16_t *t16 = malloc((got / 2 ? got / 2 : 1) * sizeof(uint16_t));
        memcpy(t16, buf, got / 2 * 2);
        snprintf(label, sizeof label, "u16 pairs of %.14s", base);
        bench(label, t16, 2, (int64_t)(got / 2), 65536);
        free(t16);
        free(buf);
    }
    return 0;
}
