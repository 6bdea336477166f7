/* bench_memory_limits.c - this machine's memory limits, as the SA-IS passes and batched
 * lookups meet them (issue 19): sequential read bandwidth, prefetched random 2-byte gathers
 * from a 400 MB array, and k independent pointer chases through a random cycle over 800 MB
 * (the memory-level-parallelism ceiling: how many DRAM misses one core overlaps).
 *
 *   gcc -O2 -pthread eval/bench_memory_limits.c -o /tmp/bench_memory_limits
 *   /tmp/bench_memory_limits [threads=1]
 *
 * Prints wall and CPU seconds per test (CPU time is the fairer figure on a shared machine: a
 * stalled load counts as CPU time, a descheduled thread does not). Memory is in 4 KiB pages
 * (no huge-page advice). With threads=2 the gathers and reads run on two threads at once
 * (aggregate figures). Needs about 1.6 GB.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N_TEXT ((size_t)200 << 20)   /* u16 symbols: 400 MB */
#define N_GATHER ((size_t)50 << 20)  /* random reads per thread */
#define N_NODES ((size_t)25 << 20)   /* chase nodes, one per 32 bytes: 800 MB */
#define CHASE_STEPS ((size_t)20000000)

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint16_t *text;
static uint32_t *gather_idx[2];
static uint32_t *chase; /* chase[8 * i] = next node of node i */

typedef struct {
    int id, test, threads, chains;
    double cpu;
    uint64_t sink;
} job;

static void *run_job(void *arg) {
    job *j = (job *)arg;
    double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    uint64_t s = 0;
    if (j->test == 0) { /* sequential read of this thread's share, 3 times */
        const uint64_t *w = (const uint64_t *)text;
        size_t words = N_TEXT / 4 / (size_t)j->threads, b = (size_t)j->id * words;
        for (int r = 0; r < 3; r++)
            for (size_t i = b; i < b + words; i++) s += w[i];
    } else if (j->test == 1) { /* random gathers, prefetched 64 ahead (as the SA-IS passes) */
        const uint32_t *ix = gather_idx[j->id];
        for (size_t i = 0; i < N_GATHER; i++) {
            if (i + 64 < N_GATHER) __builtin_prefetch(text + ix[i + 64]);
            s += text[ix[i]];
        }
    } else { /* k independent chains, CHASE_STEPS steps in all */
        uint32_t p[64];
        int k = j->chains;
        for (int c = 0; c < k; c++) p[c] = (uint32_t)(((size_t)c * 977 + 1) % N_NODES);
        for (size_t i = 0; i < CHASE_STEPS / (size_t)k; i++)
            for (int c = 0; c < k; c++) p[c] = chase[(size_t)p[c] * 8];
        for (int c = 0; c < k; c++) s += p[c];
    }
    j->cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    j->sink = s;
    return NULL;
}

static void measure(int test, int threads, int chains) {
    pthread_t th[2];
    job jobs[2];
    double w0 = clock_s(CLOCK_MONOTONIC), cpu = 0;
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){t, test, threads, chains, 0, 0};
        pthread_create(&th[t], NULL, run_job, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        cpu += jobs[t].cpu;
    }
    double wall = clock_s(CLOCK_MONOTONIC) - w0;
    if (test == 0)
        printf("sequential read, %d thread(s): %.2f GB/s wall; %.3f s wall, %.3f s CPU\n", threads,
               3.0 * (double)N_TEXT * 2 / wall / 1e9, wall, cpu);
    else if (test == 1)
        printf("random gathers, %d thread(s): %.1f ns wall, %.1f ns CPU per gather\n", threads,
               wall / (double)(N_GATHER * (size_t)threads) * 1e9, cpu / (double)(N_GATHER * (size_t)threads) * 1e9);
    else
        printf("pointer chase, %2d chains: %.1f ns wall, %.1f ns CPU per miss\n", chains,
               wall / (double)CHASE_STEPS * 1e9, cpu / (double)CHASE_STEPS * 1e9);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int threads = argc > 1 && atoi(argv[1]) == 2 ? 2 : 1;
    text = malloc(N_TEXT * sizeof(uint16_t));
    chase = malloc(N_NODES * 8 * sizeof(uint32_t));
    uint32_t *perm = malloc(N_NODES * sizeof(uint32_t));
    for (int t = 0; t < 2; t++) gather_idx[t] = malloc(N_GATHER * sizeof(uint32_t));
    if (!text || !chase || !perm || !gather_idx[0] || !gather_idx[1]) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < N_TEXT; i++) text[i] = (uint16_t)i;
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < N_GATHER; i++) gather_idx[t][i] = (uint32_t)(next_rand() % N_TEXT);
    for (size_t i = 0; i < N_NODES; i++) perm[i] = (uint32_t)i; /* one random cycle */
    for (size_t i = N_NODES - 1; i > 0; i--) {
        size_t j = next_rand() % (i + 1);
        uint32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (size_t i = 0; i < N_NODES; i++) chase[(size_t)perm[i] * 8] = perm[(i + 1) % N_NODES];
    free(perm);
    measure(0, threads, 0);
    measure(1, threads, 0);
    for (int k = 1; k <= 64; k *= 2) measure(2, 1, k);
    return 0;
}
