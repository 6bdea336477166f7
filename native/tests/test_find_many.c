/* test_find_many.c - the interleaved searches (native/src/find_many.c) against the one-at-a-time
 * search (ig_find: the exact ranges, empty ones included) and against brute force (the counts),
 * with more queries than lanes so that lanes are refilled mid-flight, over widths 1, 2 and 4, one
 * and several shards, with and without the cache of short contexts; and the batch calls built on
 * them (count_batch, infgram_prob_batch) against the single calls.
 */
#include "reference.h"
#include "find_many.h"

#include "check.h"

static uint64_t rng(uint64_t *x) {
    *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
    return *x;
}

/* n queries into vals/off: substrings of the documents (often extended or mutated by one token),
   random id strings, and empty queries. */
static void make_queries(const ref_corpus *c, int64_t n, uint64_t seed, uint32_t *vals, int64_t *off) {
    uint64_t x = seed | 1;
    int64_t k = 0;
    off[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t kind = rng(&x) % 8;
        int64_t len = (int64_t)(rng(&x) % 14);
        int64_t d = (int64_t)(rng(&x) % (uint64_t)c->n_docs);
        int64_t dl = c->offsets[d + 1] - c->offsets[d];
        if (kind == 0) len = 0;
        if (kind <= 4 && dl > 0) { /* a substring of a document */
            int64_t a = (int64_t)(rng(&x) % (uint64_t)dl);
            if (len > dl - a) len = dl - a;
            for (int64_t j = 0; j < len; j++) vals[k + j] = c->ids[c->offsets[d] + a + j];
            if (kind == 3 && len > 0) vals[k + len - 1] = (uint32_t)(rng(&x) % c->vocab); /* mutated */
            if (kind == 4) vals[k + len++] = (uint32_t)(rng(&x) % (c->vocab < 6 ? c->vocab : 6)); /* extended */
        } else {
            for (int64_t j = 0; j < len; j++)
                vals[k + j] = (uint32_t)(rng(&x) % 3 ? rng(&x) % (c->vocab < 6 ? c->vocab : 6) : rng(&x) % c->vocab);
        }
        k += len;
        off[i + 1] = k;
    }
}

static void check_corpus(const ref_corpus *c, ig_index *ix, uint64_t seed) {
    enum { N = 300 };
    static uint32_t vals[N * 16];
    static int64_t off[N + 1];
    static ig_query qs[N];
    static ig_range got[N * 8];
    static uint64_t counts[N], batch[N];
    make_queries(c, N, seed, vals, off);
    for (int64_t i = 0; i < N; i++) qs[i] = (ig_query){vals + off[i], off[i + 1] - off[i]};
    int ns = ix->n_shards;
    for (int64_t n = 0; n <= N; n += n < 40 ? 7 : 129) { /* batches shorter and longer than the lanes */
        ig_find_many_all(ix, qs, n, got, counts);
        for (int64_t i = 0; i < n; i++) {
            int64_t lo[8], hi[8];
            CHECK(ig_find(ix, qs[i].q, qs[i].len, lo, hi, err, sizeof err) == IG_OK, "%s", err);
            for (int sh = 0; sh < ns; sh++)
                CHECK(got[i * ns + sh].lo == lo[sh] && got[i * ns + sh].hi == hi[sh],
                      "query %lld shard %d: [%lld, %lld) vs ig_find [%lld, %lld)", (long long)i, sh,
                      (long long)got[i * ns + sh].lo, (long long)got[i * ns + sh].hi, (long long)lo[sh], (long long)hi[sh]);
            CHECK(counts[i] == ref_naive_count(c, qs[i].q, qs[i].len), "query %lld: count %llu", (long long)i,
                  (unsigned long long)counts[i]);
        }
    }
    /* narrowing by one token (state steps, probabilities): every query's context (all but its
       last token; the empty one is the whole corpus) extended by its last token, as
       ig_extend_ranges does it, empty contexts included */
    static ig_range ctx[N * 8], next[N * 8], want[8];
    static int64_t ds[N];
    static uint32_t ts[N];
    static uint64_t ext_counts[N];
    int64_t m = 0;
    for (int64_t i = 0; i < N; i++) {
        if (qs[i].len == 0) continue;
        ds[m] = qs[i].len - 1;
        ts[m] = qs[i].q[qs[i].len - 1];
        ig_find_all(ix, qs[i].q, ds[m], ctx + m * ns);
        m++;
    }
    ig_extend_many(ix, ctx, ds, ts, m, next, ext_counts);
    for (int64_t k = 0; k < m; k++) {
        uint64_t c = ig_extend_ranges(ix, ctx + k * ns, ds[k], ts[k], want);
        CHECK(c == ext_counts[k], "extension %lld: count %llu vs %llu", (long long)k, (unsigned long long)ext_counts[k],
              (unsigned long long)c);
        for (int sh = 0; sh < ns; sh++)
            CHECK(next[k * ns + sh].lo == want[sh].lo && next[k * ns + sh].hi == want[sh].hi,
                  "extension %lld shard %d", (long long)k, sh);
    }
    ig_find_many_all(ix, qs, N, got, counts); /* (checked above, by parts) */
    for (int t = 1; t <= 3; t += 2) {
        CHECK(ig_count_batch(ix, vals, off[N], off, N, batch, t, err, sizeof err) == IG_OK, "%s", err);
        CHECK(!memcmp(batch, counts, sizeof counts), "count_batch threads %d", t);
    }
}

int main(void) {
    struct {
        int width;
        uint32_t vocab;
        int shards;
        int64_t ntd_cost, docs, max_doc;
    } cases[] = {{1, 7, 1, 2, 200, 80}, {2, 300, 3, 0, 300, 60}, {4, 70000, 2, 1, 150, 120}, {2, 5, 1, 0, 400, 200}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ref_corpus c;
        char name[32];
        ref_corpus_make(&c, cases[k].width, cases[k].vocab, cases[k].docs, cases[k].max_doc, cases[k].shards, 7 + k);
        snprintf(name, sizeof name, "fm%zu", k);
        ig_index *ix = NULL;
        if (ref_corpus_write(&c, ref_tmpdir(), name, cases[k].ntd_cost) || ref_corpus_open(&c, &ix)) return 2;
        for (uint64_t seed = 1; seed <= 3; seed++) check_corpus(&c, ix, seed * 7919 + k);
        ig_close(ix);
        ref_corpus_free(&c);
    }
    printf("test_find_many: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
