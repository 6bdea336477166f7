/* test_trace.c - ig_creativity_batch / ig_attribute_batch / ig_locate_ranges / ig_doc_window
   against brute force on the reference corpora (u8 / u16 / u32, several shards), under the
   sanitizers of run.sh: every longest match, every span of the "end beyond the last kept span"
   rule (no delimiters or word rule; with min_len and max_count), each span's occurrences, and
   argument errors. (Delimiters and word starts: tests/trace/test_attribution_property.py.) */
#include "reference.h"

#include "check.h"

/* The longest prefix of x[l..m) that occurs. */
static int64_t naive_match(const ref_corpus *c, const uint32_t *x, int64_t m, int64_t l) {
    int64_t k = 0;
    while (l + k < m && ref_naive_count(c, x + l, k + 1)) k++;
    return k;
}

/* A text: pieces of documents and random ids (a few the corpus lacks). */
static int64_t make_text(const ref_corpus *c, uint64_t *seed, uint32_t *x, int64_t cap) {
    int64_t m = 0;
    while (m < cap - 40) {
        *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t r = *seed >> 33;
        if (r % 3 && c->n_docs) {
            int64_t d = (int64_t)(r % (uint64_t)c->n_docs), len = c->offsets[d + 1] - c->offsets[d];
            if (len == 0) continue;
            int64_t a = (int64_t)((r >> 8) % (uint64_t)len), b = a + 1 + (int64_t)((r >> 16) % 30);
            if (b > len) b = len;
            for (int64_t i = a; i < b; i++) x[m++] = c->ids[c->offsets[d] + i];
        } else {
            x[m++] = (uint32_t)(r % c->vocab);
        }
        if ((r >> 40) % 5 == 0) break;
    }
    return m;
}

static void test_texts(const ref_corpus *c, ig_index *ix) {
    enum { N = 6, CAP = 160 };
    uint32_t vals[N * CAP];
    int64_t offs[N + 1] = {0};
    uint64_t seed = 7;
    for (int i = 0; i < N; i++) offs[i + 1] = offs[i] + make_text(c, &seed, vals + offs[i], CAP);
    int64_t nv = offs[N], S = c->n_shards;
    int64_t *match = malloc(sizeof(int64_t) * (size_t)(nv + 1));
    CHECK(ig_creativity_batch(ix, vals, nv, offs, N, match, 2, NULL, err, sizeof err) == IG_OK, "%s", err);
    for (int i = 0; i < N; i++)
        for (int64_t l = 0; l < offs[i + 1] - offs[i]; l++)
            CHECK(match[offs[i] + l] == naive_match(c, vals + offs[i], offs[i + 1] - offs[i], l), "text %d pos %lld", i,
                  (long long)l);
    int64_t n_spans[N], *sl = malloc(sizeof(int64_t) * (size_t)nv), *sr = malloc(sizeof(int64_t) * (size_t)nv);
    uint64_t *sc = malloc(sizeof(uint64_t) * (size_t)nv);
    int64_t *lo = malloc(sizeof(int64_t) * (size_t)(nv * S)), *hi = malloc(sizeof(int64_t) * (size_t)(nv * S));
    const uint64_t max_counts[2] = {2, UINT64_MAX}; /* the last run's spans are located below */
    for (int64_t min_len = 1; min_len <= 3; min_len += 2)
        for (int mc = 0; mc < 2; mc++) {
            uint64_t max_count = max_counts[mc];
            ig_attribute_opts o = {min_len, max_count, NULL, NULL};
            CHECK(ig_attribute_batch(ix, vals, nv, offs, N, &o, n_spans, sl, sr, sc, lo, hi, 2, NULL, err, sizeof err) == IG_OK,
                  "%s", err);
            for (int i = 0; i < N; i++) {
                const uint32_t *x = vals + offs[i];
                int64_t m = offs[i + 1] - offs[i], k = 0, last_r = 0;
                for (int64_t l = 0; l < m; l++) {
                    int64_t r = l + naive_match(c, x, m, l);
                    if (r - l < min_len || r <= last_r) continue;
                    uint64_t cnt = ref_naive_count(c, x + l, r - l);
                    if (cnt > max_count) continue;
                    int64_t slot = offs[i] + k++;
                    CHECK(k <= n_spans[i] && sl[slot] == l && sr[slot] == r && sc[slot] == cnt,
                          "text %d span %lld: [%lld, %lld) x%llu", i, (long long)k, (long long)l, (long long)r,
                          (unsigned long long)cnt);
                    last_r = r;
                }
                CHECK(k == n_spans[i], "text %d: %lld spans, want %lld", i, (long long)n_spans[i], (long long)k);
            }
        }
    /* occurrences of every span of the last run: each is the span, all of them found */
    int64_t total = 0;
    for (int i = 0; i < N; i++) total += n_spans[i];
    int64_t *clo = malloc(sizeof(int64_t) * (size_t)((total + 1) * S)), *chi = malloc(sizeof(int64_t) * (size_t)((total + 1) * S));
    int64_t *from = malloc(sizeof(int64_t) * (size_t)(total + 1)), *to = malloc(sizeof(int64_t) * (size_t)(total + 1));
    int64_t k = 0;
    for (int i = 0; i < N; i++)
        for (int64_t j = 0; j < n_spans[i]; j++, k++) {
            int64_t slot = offs[i] + j;
            memcpy(clo + k * S, lo + slot * S, sizeof(int64_t) * (size_t)S);
            memcpy(chi + k * S, hi + slot * S, sizeof(int64_t) * (size_t)S);
            from[k] = offs[i] + sl[slot];
            to[k] = offs[i] + sr[slot];
        }
    enum { MAXP = 1000 };
    int32_t *shard = malloc(sizeof(int32_t) * (size_t)(total * MAXP + 1));
    int64_t *doc = malloc(sizeof(int64_t) * (size_t)(total * MAXP + 1)), *off = malloc(sizeof(int64_t) * (size_t)(total * MAXP + 1));
    int64_t *n_out = malloc(sizeof(int64_t) * (size_t)(total + 1));
    CHECK(ig_locate_ranges(ix, clo, chi, total, MAXP, shard, doc, off, n_out, NULL, err, sizeof err) == IG_OK, "%s", err);
    uint32_t win[64];
    for (k = 0; k < total; k++) {
        int64_t len = to[k] - from[k];
        CHECK((uint64_t)n_out[k] == ref_naive_count(c, vals + from[k], len), "span %lld: %lld occurrences", (long long)k,
              (long long)n_out[k]);
        for (int64_t p = 0; p < n_out[k]; p++) {
            int64_t q = k * MAXP + p, b0, got;
            CHECK(p == 0 || shard[q] >= shard[q - 1], "shard order");
            int rc = ig_doc_window(ix, shard[q], doc[q], off[q], off[q] + len, win, 64, &b0, &got, err, sizeof err);
            CHECK(rc == IG_OK && b0 == off[q] && got == len && !memcmp(win, vals + from[k], sizeof(uint32_t) * (size_t)len),
                  "span %lld occurrence %lld", (long long)k, (long long)p);
        }
    }
    /* arguments */
    ig_attribute_opts bad = {0, 1, NULL, NULL};
    CHECK(ig_attribute_batch(ix, vals, nv, offs, N, &bad, n_spans, sl, sr, sc, NULL, NULL, 1, NULL, err, sizeof err) == IG_ERR_ARG,
          "min_len 0 accepted");
    uint32_t sep = c->sep;
    int64_t one[2] = {0, 1};
    CHECK(ig_creativity_batch(ix, &sep, 1, one, 1, match, 1, NULL, err, sizeof err) == IG_ERR_ARG && strstr(err, "separator"),
          "separator accepted");
    int64_t badlo = 0, badhi = INT64_MAX;
    if (S == 1)
        CHECK(ig_locate_ranges(ix, &badlo, &badhi, 1, 1, shard, doc, off, n_out, NULL, err, sizeof err) == IG_ERR_ARG,
              "range beyond the shard accepted");
    CHECK(ig_doc_window(ix, 0, -1, 0, 1, win, 64, &badlo, &badhi, err, sizeof err) == IG_ERR_ARG, "doc -1 accepted");
    /* a cancel flag already set: every call stops with IG_ERR_CANCELLED */
    int stop = 1;
    ig_attribute_opts plain = {1, UINT64_MAX, NULL, NULL};
    CHECK(ig_creativity_batch(ix, vals, nv, offs, N, match, 2, &stop, err, sizeof err) == IG_ERR_CANCELLED,
          "creativity ran on past its cancel flag");
    CHECK(ig_attribute_batch(ix, vals, nv, offs, N, &plain, n_spans, sl, sr, sc, NULL, NULL, 2, &stop, err, sizeof err) ==
              IG_ERR_CANCELLED && strstr(err, "cancelled"), "attribute ran on past its cancel flag");
    CHECK(total == 0 || ig_locate_ranges(ix, clo, chi, total, MAXP, shard, doc, off, n_out, &stop, err, sizeof err) ==
              IG_ERR_CANCELLED, "locate ran on past its cancel flag");
    free(match); free(sl); free(sr); free(sc); free(lo); free(hi); free(clo); free(chi); free(from); free(to);
    free(shard); free(doc); free(off); free(n_out);
}

int main(void) {
    struct {
        int width;
        uint32_t vocab;
        int shards;
    } cases[] = {{1, 7, 1}, {2, 300, 3}, {4, 70000, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ref_corpus c;
        char name[32];
        ref_corpus_make(&c, cases[k].width, cases[k].vocab, 30, 50, cases[k].shards, 199 + k);
        snprintf(name, sizeof name, "trace%zu", k);
        ig_index *ix = NULL;
        if (ref_corpus_write(&c, ref_tmpdir(), name, 0) || ref_corpus_open(&c, &ix)) return 2;
        test_texts(&c, ix);
        ig_close(ix);
        ref_corpus_free(&c);
    }
    printf("test_trace: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
