/* standalone.c - a small driver for the fuzz targets where clang's libFuzzer is missing (gcc
 * builds): it runs every seed (in file name order), then mutates random seeds (bit flips, byte
 * writes, inserts, erases, splices, truncations) until the time or run budget is spent; the
 * same -seed and inputs give the same executions. Not coverage-guided,
 * but it runs under the same sanitizers and takes libFuzzer's flags that fuzz/run.sh uses:
 *
 *   target [-max_total_time=S] [-runs=N] [-seed=N] [-max_len=N] [-artifact_prefix=P]
 *          [-print_final_stats=1] [other -flags ignored] DIR_OR_FILE...
 *
 * The input being run is written to <artifact_prefix>crash-<pid> when the process dies (ASan's
 * death callback, or a fatal signal), and a line "stat::number_of_executed_units: N" ends a
 * clean run, as with libFuzzer.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);
__attribute__((weak)) void __sanitizer_set_death_callback(void (*cb)(void));

static uint8_t *cur;
static size_t cur_len;
static char artifact[4096] = "./";

static void save_current(void) {
    static int saved = 0;
    if (saved++ || !cur) return;
    char path[4200];
    snprintf(path, sizeof path, "%scrash-%d", artifact, (int)getpid());
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(cur, 1, cur_len, f);
        fclose(f);
        fprintf(stderr, "standalone: input written to %s\n", path);
    }
}

static void on_signal(int sig) {
    save_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

typedef struct {
    uint8_t *p;
    size_t n;
} unit;
static unit *seeds;
static size_t n_seeds, cap_seeds;

static void add_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    if (n_seeds == cap_seeds) {
        cap_seeds = cap_seeds ? 2 * cap_seeds : 64;
        seeds = realloc(seeds, cap_seeds * sizeof *seeds);
    }
    seeds[n_seeds++] = (unit){p, n > 0 ? (size_t)n : 0};
}

static void add_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        add_file(path);
        return;
    }
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort); /* sorted: a seed's number is the same everywhere */
    if (n < 0) return;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, names[i]->d_name);
            add_file(sub);
        }
        free(names[i]);
    }
    free(names);
}

static uint64_t rs;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

/* One to eight random edits of a copy of a random seed into buf (capacity max_len). */
static size_t mutate(uint8_t *buf, size_t max_len) {
    size_t n = 0;
    if (n_seeds) {
        const unit *u = &seeds[rnd() % n_seeds];
        n = u->n < max_len ? u->n : max_len;
        memcpy(buf, u->p, n);
    }
    static const uint8_t interesting[] = {0, 1, 2, 0x7F, 0x80, 0xEE, 0xF0, 0xFE, 0xFF};
    int edits = 1 + (int)(rnd() % 8);
    for (int k = 0; k < edits; k++) {
        size_t i = n ? (size_t)(rnd() % n) : 0;
        switch (rnd() % 8) {
        case 0: if (n) buf[i] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 1: if (n) buf[i] = (uint8_t)rnd(); break;
        case 2: if (n) buf[i] = interesting[rnd() % sizeof interesting]; break;
        case 3: /* insert a byte */
            if (n < max_len) {
                memmove(buf + i + 1, buf + i, n - i);
                buf[i] = (uint8_t)rnd();
                n++;
            }
            break;
        case 4: { /* erase a few bytes */
            size_t m = 1 + rnd() % 8;
            if (i + m <= n) {
                memmove(buf + i, buf + i + m, n - i - m);
                n -= m;
            }
            break;
        }
        case 5: /* truncate */
            n = i;
            break;
        case 6: { /* overwrite with a chunk of another seed */
            if (!n_seeds || !n) break;
            const unit *u = &seeds[rnd() % n_seeds];
            if (!u->n) break;
            size_t a = rnd() % u->n, m = 1 + rnd() % 16;
            for (size_t j = 0; j < m && a + j < u->n && i + j < n; j++) buf[i + j] = u->p[a + j];
            break;
        }
        default: /* a random 32-bit little-endian value */
            for (int j = 0; j < 4 && i + (size_t)j < n; j++) buf[i + (size_t)j] = (uint8_t)(rnd() >> (8 * j));
        }
    }
    return n;
}

int main(int argc, char **argv) {
    double max_time = 0;
    long long runs = -1;
    size_t max_len = 4096;
    int inputs = 0;
    rs = ((uint64_t)time(NULL) << 20 ^ (uint64_t)getpid()) | 1; /* random unless -seed= says */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "-max_total_time=", 16)) max_time = atof(a + 16);
        else if (!strncmp(a, "-runs=", 6)) runs = atoll(a + 6);
        else if (!strncmp(a, "-seed=", 6)) rs = (uint64_t)strtoull(a + 6, NULL, 10) | 1;
        else if (!strncmp(a, "-max_len=", 9)) max_len = (size_t)atoll(a + 9);
        else if (!strncmp(a, "-artifact_prefix=", 17)) snprintf(artifact, sizeof artifact, "%s", a + 17);
        else if (a[0] == '-') continue;
        else add_path(a), inputs++;
    }
    fprintf(stderr, "INFO: Seed: %llu\n", (unsigned long long)rs); /* (as libFuzzer: -seed=N repeats a run) */
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_current);
    signal(SIGSEGV, on_signal);
    signal(SIGABRT, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGFPE, on_signal);
    long long done = 0;
    for (size_t i = 0; i < n_seeds && (runs < 0 || done < runs); i++, done++) { /* every seed once */
        cur = seeds[i].p;
        cur_len = seeds[i].n;
        LLVMFuzzerTestOneInput(cur, cur_len);
    }
    if (inputs && max_time <= 0 && runs < 0) runs = done; /* like libFuzzer: files only, run them */
    uint8_t *buf = malloc(max_len + 1);
    time_t start = time(NULL);
    while ((runs < 0 || done < runs) && (max_time <= 0 || difftime(time(NULL), start) < max_time)) {
        cur = buf;
        cur_len = mutate(buf, max_len);
        LLVMFuzzerTestOneInput(cur, cur_len);
        done++;
        if (runs < 0 && max_time <= 0 && done >= 1000) break;
    }
    cur = NULL;
    fprintf(stderr, "stat::number_of_executed_units: %lld\n", done);
    return 0;
}
