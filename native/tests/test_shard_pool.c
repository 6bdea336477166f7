/* test_shard_pool.c - the shard pool (native/src/shard_pool.c) under the sanitizers:
 *
 *  - answers on the pool (IG_SHARDS_PARALLEL) equal the serial ones, 2..5 shards, widths 1/2/4;
 *  - several threads querying one index at once (one holds the pool, the others run serially);
 *  - a forked child (whose copy of the pool has no threads) queries on a fresh pool, and a
 *    child forked while another thread held the pool still gets it. The holder is parked inside
 *    a step when the child is forked (every pool thread blocked in read()), so the fork never
 *    lands while a thread is inside malloc or the sanitizer runtime: a child forked then can
 *    deadlock on a lock that no thread of it will release (gcc 12's libasan takes no lock
 *    around fork), which is the runtime's hazard, not the pool's, and made this test hang
 *    now and then;
 *  - ig_close stops and joins the workers (the leak checker sees no thread left).
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reference.h"
#include "shard_pool.h"

#include "check.h"

enum { NQ = 120, QMAX = 12 };

typedef struct {
    uint32_t q[NQ][QMAX];
    int64_t len[NQ];
} queries;

/* Substrings of the corpus (some with a token changed) and longer prompts. */
static void make_queries(const ref_corpus *c, queries *qs, uint64_t seed) {
    uint64_t x = seed | 1;
    int64_t total = c->offsets[c->n_docs];
    for (int i = 0; i < NQ; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int64_t len = (int64_t)(x % QMAX), start = total > len ? (int64_t)((x >> 16) % (uint64_t)(total - len)) : 0;
        if (total < len) len = total;
        memcpy(qs->q[i], c->ids + start, (size_t)len * sizeof(uint32_t));
        if (len && x % 5 == 0) qs->q[i][len - 1] = (uint32_t)((x >> 40) % c->vocab);
        qs->len[i] = len;
    }
}

/* A digest of every answer the pool serves: count, find, ntd, ∞-gram prob and suffix, ntd batch
   (∞-gram), dense scoring. */
static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull; }

static uint64_t answers(ig_index *ix, const queries *qs) {
    uint64_t h = 1469598103934665603ull;
    uint32_t *toks = malloc((1 << 17) * sizeof *toks); /* (per call: threads share this function) */
    uint64_t *cnts = malloc((1 << 17) * sizeof *cnts);
    int64_t lo[8], hi[8];
    for (int i = 0; i < NQ; i++) {
        const uint32_t *q = qs->q[i];
        int64_t len = qs->len[i], n = 0, sl = 0;
        uint64_t cnt = 0, total = 0;
        char e[256];
        h = mix(h, (uint64_t)ig_count(ix, q, len, &cnt, e, sizeof e));
        h = mix(h, cnt);
        h = mix(h, (uint64_t)ig_count_fast(ix, q, len));
        ig_find(ix, q, len, lo, hi, e, sizeof e);
        ig_info info;
        ig_get_info(ix, &info);
        for (int s = 0; s < info.n_shards; s++) h = mix(mix(h, (uint64_t)lo[s]), (uint64_t)hi[s]);
        h = mix(h, (uint64_t)ig_ntd(ix, q, len, toks, cnts, 1 << 17, &n, &total, e, sizeof e));
        for (int64_t k = 0; k < n; k++) h = mix(mix(h, toks[k]), cnts[k]);
        ig_infgram_suffix(ix, q, len, &sl, e, sizeof e);
        h = mix(h, (uint64_t)sl);
        ig_prob p;
        ig_infgram_prob(ix, q, len, len ? q[0] : 0, &p, e, sizeof e);
        h = mix(mix(mix(mix(h, p.count), p.prompt_count), (uint64_t)p.suffix_len), (uint64_t)p.sparse);
        ig_ngram_prob(ix, q, len, len ? q[len - 1] : 0, &p, e, sizeof e);
        h = mix(mix(mix(h, p.count), p.prompt_count), (uint64_t)p.sparse);
        int64_t off[2] = {0, len};
        ig_ntd_batch *b = NULL;
        if (ig_ntd_batch_run(ix, q, len, off, 1, IG_NTD_INFGRAM, 0, 0, 1, &b, e, sizeof e) == IG_OK) {
            int64_t ro[2], m = ig_ntd_batch_entries(b), bsl;
            uint64_t btot;
            uint8_t sp, ap;
            ig_ntd_batch_copy(b, ro, toks, cnts, 1 << 17, &bsl, &btot, &sp, &ap, e, sizeof e);
            for (int64_t k = 0; k < m; k++) h = mix(mix(h, toks[k]), cnts[k]);
            h = mix(mix(mix(h, (uint64_t)bsl), btot), sp);
            ig_ntd_batch_free(b);
        }
        uint64_t num[QMAX], den[QMAX];
        int64_t sls[QMAX];
        ig_score(ix, q, len, num, den, sls, NULL, e, sizeof e);
        for (int64_t k = 0; k < len; k++) h = mix(mix(mix(h, num[k]), den[k]), (uint64_t)sls[k]);
    }
    free(toks);
    free(cnts);
    return h;
}

typedef struct {
    ig_index *ix;
    const queries *qs;
    uint64_t want;
    int ok;
} thread_arg;

static void *query_thread(void *arg) {
    thread_arg *t = arg;
    t->ok = 1;
    for (int r = 0; r < 3; r++) t->ok &= answers(t->ix, t->qs) == t->want;
    return NULL;
}

/* Fork a child that checks the answers on its own pool; returns its verdict. A child that
   hangs is killed by its alarm, and counts as disagreeing. */
static int child_agrees(ig_index *ix, const queries *qs, uint64_t want) {
    pid_t pid = fork();
    if (pid == 0) {
        alarm(120);
        _exit(answers(ix, qs) == want && ig_shard_pool_steps(ix) > 0 ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* A step that parks every thread that takes a shard until the test lets it go: one byte read
   from a pipe per shard. `entered` counts the shards taken. */
typedef struct {
    int fd;
    int entered; /* atomic */
} park;

static void park_shard(void *ctx, int shard) {
    park *k = ctx;
    char byte;
    (void)shard;
    __atomic_add_fetch(&k->entered, 1, __ATOMIC_ACQ_REL);
    while (read(k->fd, &byte, 1) < 0) {}
}

typedef struct {
    ig_index *ix;
    park *k;
} hold_arg;

static void *hold_pool(void *arg) {
    hold_arg *h = arg;
    ig_each_shard(h->ix, park_shard, h->k);
    return NULL;
}

/* Fork while another thread holds the pool, mid-step: the child's copy names a holder (and
   workers) that do not exist in it, and must still query on a pool of its own. */
static int child_of_a_held_pool_agrees(ig_index *ix, int shards, const queries *qs, uint64_t want) {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    park k = {fds[0], 0};
    hold_arg h = {ix, &k};
    pthread_t holder;
    pthread_create(&holder, NULL, hold_pool, &h);
    /* every shard taken means the holder and all its workers are parked in read() */
    while (__atomic_load_n(&k.entered, __ATOMIC_ACQUIRE) < shards) usleep(1000);
    int ok = child_agrees(ix, qs, want);
    for (int s = 0; s < shards; s++) (void)!write(fds[1], "x", 1);
    pthread_join(holder, NULL);
    close(fds[0]);
    close(fds[1]);
    return ok;
}

static void test_case(int width, uint32_t vocab, int shards, uint64_t seed) {
    ref_corpus c;
    char name[32];
    ref_corpus_make(&c, width, vocab, 40, 60, shards, seed);
    snprintf(name, sizeof name, "pool%d_%d", width, shards);
    ig_index *ix = NULL;
    if (ref_corpus_write(&c, ref_tmpdir(), name, 1) || ref_corpus_open(&c, &ix)) {
        CHECK(0, "corpus %s", name);
        ref_corpus_free(&c);
        return;
    }
    static queries qs;
    make_queries(&c, &qs, seed * 7);
    CHECK(ig_get_shard_mode(ix) == (shards > 1 ? IG_SHARDS_AUTO : IG_SHARDS_SERIAL), "default mode");
    CHECK(ig_set_shard_mode(ix, IG_SHARDS_SERIAL) == IG_OK, "serial");
    uint64_t want = answers(ix, &qs);
    CHECK(ig_shard_pool_steps(ix) == 0, "serial mode used the pool");
    CHECK(ig_set_shard_mode(ix, IG_SHARDS_PARALLEL) == IG_OK, "parallel");
    CHECK(answers(ix, &qs) == want, "%s: pool answers differ from serial ones", name);
    CHECK(shards == 1 || ig_shard_pool_steps(ix) > 0, "%s: parallel mode never used the pool", name);
    CHECK(ig_set_shard_mode(ix, 7) == IG_ERR_ARG, "unknown mode accepted");
    if (shards > 1) {
        pthread_t th[4];
        thread_arg args[4];
        for (int t = 0; t < 4; t++) {
            args[t] = (thread_arg){ix, &qs, want, 0};
            pthread_create(&th[t], NULL, query_thread, &args[t]);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            CHECK(args[t].ok, "%s: thread %d got other answers", name, t);
        }
        CHECK(child_agrees(ix, &qs, want), "%s: a forked child got other answers", name);
        CHECK(child_of_a_held_pool_agrees(ix, shards, &qs, want), "%s: a child forked mid-step got other answers", name);
        CHECK(answers(ix, &qs) == want, "%s: the parent's pool after forks", name);
        CHECK(ig_set_shard_mode(ix, IG_SHARDS_AUTO) == IG_OK, "auto");
        CHECK(answers(ix, &qs) == want, "%s: auto mode", name);
    }
    ig_close(ix); /* (joins the workers) */
    ref_corpus_free(&c);
}

int main(void) {
    int widths[3] = {1, 2, 4};
    uint32_t vocabs[3] = {7, 300, 70000};
    for (int w = 0; w < 3; w++)
        for (int shards = 1; shards <= 5; shards++) test_case(widths[w], vocabs[w], shards, 11 + 5 * (uint64_t)w + (uint64_t)shards);
    printf("test_shard_pool: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
