/* fuzz_query.c - every query entry point of the C API with arbitrary ids, lengths, offsets,
 * states and options, on small valid indexes built at start-up, checked against brute force.
 *
 * The input is a program: a fixture byte, then operations (one byte each, then their
 * arguments) until the input runs out. Arguments respect the API's memory contract (an array
 * is as long as the length passed with it), everything else is arbitrary: ids outside the
 * vocabulary or equal to the separator, negative or huge lengths, non-monotone offsets,
 * forged decoding states, NaN options. A call either fails cleanly (an IG_ERR_* code) or
 * answers; answers on valid input must equal the brute-force references of
 * native/tests/reference.h.
 */
#include <math.h>

#include "fz.h"

#define MAXQ 48 /* longest query built */

typedef struct {
    ref_corpus c, minus; /* minus: a subset of c's documents (for the difference queries) */
    ig_index *ix, *mx;
    ig_lm *lm, *dlm; /* dlm: the LM over ix minus mx */
} fixture;

static fixture fx[3];
static char err[1024];

static void subset_corpus(const ref_corpus *c, ref_corpus *m, int n_shards) {
    memset(m, 0, sizeof *m);
    m->width = c->width;
    m->vocab = c->vocab;
    m->sep = c->sep;
    m->offsets = calloc((size_t)c->n_docs + 1, sizeof(int64_t));
    m->ids = malloc((size_t)(c->offsets[c->n_docs] + 1) * sizeof(uint32_t));
    int64_t k = 0;
    for (int64_t d = 0; d < c->n_docs; d += 3) {
        for (int64_t i = c->offsets[d]; i < c->offsets[d + 1]; i++) m->ids[k++] = c->ids[i];
        m->offsets[++m->n_docs] = k;
    }
    m->n_shards = n_shards;
    for (int s = 0; s <= n_shards; s++) m->shard_doc[s] = m->n_docs * s / n_shards;
    ref_corpus_texts(m);
}

static void setup(fixture *f, int id, int width, uint32_t vocab, int64_t docs, int64_t max_doc, int shards,
                  int64_t ntd_cost) {
    char name[32];
    ref_corpus_make(&f->c, width, vocab, docs, max_doc, shards, 1234567u + (uint64_t)id);
    snprintf(name, sizeof name, "fx%d", id);
    if (ref_corpus_write(&f->c, ref_tmpdir(), name, ntd_cost) || ref_corpus_open(&f->c, &f->ix)) abort();
    subset_corpus(&f->c, &f->minus, shards > 1 ? 2 : 1);
    snprintf(name, sizeof name, "fx%d_minus", id);
    if (ref_corpus_write(&f->minus, ref_tmpdir(), name, ntd_cost) || ref_corpus_open(&f->minus, &f->mx)) abort();
    if (ig_lm_new(&f->lm, f->ix, 24, 1024, err, sizeof err)) abort();
    if (ig_diff_lm_new(&f->dlm, f->ix, f->mx, 24, 1024, err, sizeof err)) abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    setup(&fx[0], 0, 1, 7, 40, 60, 2, 2);       /* bytes, two shards, most short contexts cached */
    setup(&fx[1], 1, 2, 300, 40, 50, 1, 0);     /* u16, one shard, no ntdcache.bin */
    setup(&fx[2], 2, 4, 70000, 24, 40, 3, 2048); /* u32, three shards */
    return 0;
}

/* ------------------------------------------------------------------ argument builders */

/* Query ids into buf (at most MAXQ); the length passed to the API may be negative. */
static int64_t read_query(fz_in *in, const fixture *f, uint32_t *buf, int64_t *pass_len) {
    int64_t len = fz_len(in, 10);
    int64_t n = len < 0 ? 0 : len > MAXQ ? MAXQ : len;
    /* mostly copy a stretch of a real document, so that long n-grams occur */
    if (fz_u8(in) < 160 && f->c.n_docs) {
        int64_t d = fz_u8(in) % f->c.n_docs, dl = f->c.offsets[d + 1] - f->c.offsets[d];
        int64_t start = dl ? fz_u8(in) % dl : 0;
        for (int64_t i = 0; i < n; i++)
            buf[i] = start + i < dl ? f->c.ids[f->c.offsets[d] + start + i] : fz_tok(in, f->c.vocab);
        if (n && fz_u8(in) > 230) buf[fz_u8(in) % n] = fz_tok(in, f->c.vocab); /* a point change */
    } else {
        for (int64_t i = 0; i < n; i++) buf[i] = fz_tok(in, f->c.vocab);
    }
    *pass_len = len < 0 ? len : n;
    return n;
}

/* A batch: values (n_values) and offsets (n + 1), offsets usually valid, sometimes anything. */
typedef struct {
    uint32_t values[8 * MAXQ];
    int64_t offsets[17];
    int64_t n_values, n;
} batch;

static void read_batch(fz_in *in, const fixture *f, batch *b) {
    b->n = fz_u8(in) % 9;
    b->n_values = 0;
    b->offsets[0] = 0;
    for (int64_t i = 0; i < b->n; i++) {
        int64_t pass, m = read_query(in, f, b->values + b->n_values, &pass);
        if (b->n_values + m > 8 * MAXQ) m = 8 * MAXQ - b->n_values;
        b->n_values += m;
        b->offsets[i + 1] = b->n_values;
    }
    if (fz_u8(in) > 235) { /* break an offset: the call must refuse it */
        int64_t k = fz_u8(in) % (b->n + 1);
        b->offsets[k] = fz_len(in, 20);
    }
}

/* A valid row of a batch (offsets checked by the caller's rc). */
static int batch_row_ok(const fixture *f, const batch *b, int64_t i) {
    return ref_valid_ids(&f->c, b->values + b->offsets[i], b->offsets[i + 1] - b->offsets[i]);
}

static int batch_offsets_ok(const batch *b) {
    if (b->n == 0) return 1;
    if (b->offsets[0] < 0 || b->offsets[0] > b->n_values) return 0;
    for (int64_t i = 0; i < b->n; i++)
        if (b->offsets[i + 1] < b->offsets[i] || b->offsets[i + 1] > b->n_values) return 0;
    return 1;
}

/* ------------------------------------------------------------------ single queries */

static void check_ntd(const fixture *f, const uint32_t *q, int64_t len, const uint32_t *toks, const uint64_t *cnts,
                      int64_t n, uint64_t total) {
    uint64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        FZ_CHECK(i == 0 || toks[i] > toks[i - 1], "ntd tokens not increasing at %lld", (long long)i);
        FZ_CHECK(cnts[i] > 0, "zero count in ntd");
        uint64_t want;
        if (len == 0) {
            uint32_t one = toks[i];
            want = ref_naive_count(&f->c, &one, 1);
        } else {
            want = ref_naive_count_next(&f->c, q, len, toks[i]);
        }
        FZ_CHECK(cnts[i] == want, "ntd count of %u: %llu, naive %llu", toks[i], (unsigned long long)cnts[i],
                 (unsigned long long)want);
        sum += cnts[i];
    }
    FZ_CHECK(sum == total, "ntd counts sum to %llu, total %llu", (unsigned long long)sum, (unsigned long long)total);
}

static void op_single(const fixture *f, fz_in *in) {
    uint32_t q[MAXQ];
    int64_t len, n = read_query(in, f, q, &len);
    int valid = len >= 0 && ref_valid_ids(&f->c, q, n);
    uint64_t count = 0;
    int rc = ig_count(f->ix, q, len, &count, err, sizeof err);
    FZ_CHECK(valid ? rc == IG_OK : rc == IG_ERR_ARG, "count rc %d (valid %d)", rc, valid);
    uint64_t want = valid ? ref_naive_count(&f->c, q, n) : 0;
    if (valid) FZ_CHECK(count == want, "count %llu, naive %llu", (unsigned long long)count, (unsigned long long)want);
    int64_t fast = ig_count_fast(f->ix, q, len);
    FZ_CHECK(valid ? fast == (int64_t)want : fast < 0, "count_fast %lld", (long long)fast);

    int64_t lo[3], hi[3];
    rc = ig_find(f->ix, q, len, lo, hi, err, sizeof err);
    if (valid) {
        uint64_t c = 0;
        for (int s = 0; s < f->c.n_shards; s++) c += (uint64_t)(hi[s] - lo[s]);
        FZ_CHECK(rc == IG_OK && c == want, "find");
    }

    /* ntd with a caller capacity that may be too small */
    int64_t cap = fz_len(in, 12);
    if (cap < 0 || cap > 4096) cap = cap < 0 ? 0 : 4096;
    uint32_t *toks = malloc((size_t)(cap ? cap : 1) * sizeof *toks);
    uint64_t *cnts = malloc((size_t)(cap ? cap : 1) * sizeof *cnts);
    int64_t n_out = -1;
    uint64_t total = 0;
    rc = ig_ntd(f->ix, q, len, toks, cnts, cap, &n_out, &total, err, sizeof err);
    if (valid) {
        FZ_CHECK(rc == IG_OK || rc == IG_ERR_CAPACITY, "ntd rc %d: %s", rc, err);
        FZ_CHECK(rc == IG_OK ? n_out <= cap : n_out > cap, "ntd n_out %lld cap %lld", (long long)n_out, (long long)cap);
        if (rc == IG_OK) check_ntd(f, q, n, toks, cnts, n_out, total);
    }
    free(toks);
    free(cnts);

    int64_t sl = -1;
    rc = ig_infgram_suffix(f->ix, q, len, &sl, err, sizeof err);
    if (valid) {
        int64_t w = ref_naive_suffix(&f->c, q, n, n);
        FZ_CHECK(rc == IG_OK && sl == w, "infgram suffix %lld, naive %lld", (long long)sl, (long long)w);
    }
    uint32_t token = fz_tok(in, f->c.vocab);
    ig_prob p, pn;
    int rc1 = ig_infgram_prob(f->ix, q, len, token, &p, err, sizeof err);
    int rc2 = ig_ngram_prob(f->ix, q, len, token, &pn, err, sizeof err);
    if (valid && token < f->c.vocab) {
        FZ_CHECK(rc1 == IG_OK && rc2 == IG_OK, "prob rc %d %d", rc1, rc2);
        int64_t d = p.suffix_len;
        uint32_t qt[MAXQ + 1];
        memcpy(qt, q + n - d, (size_t)d * sizeof *qt);
        qt[d] = token;
        FZ_CHECK(p.prompt_count == ref_naive_count(&f->c, q + n - d, d) && p.count == ref_naive_count(&f->c, qt, d + 1),
                 "infgram_prob counts");
        memcpy(qt, q, (size_t)n * sizeof *qt);
        qt[n] = token;
        FZ_CHECK(pn.prompt_count == want && pn.count == ref_naive_count(&f->c, qt, n + 1), "ngram_prob counts");
    } else {
        FZ_CHECK(rc1 == IG_ERR_ARG && rc2 == IG_ERR_ARG, "prob accepted bad ids (%d %d)", rc1, rc2);
    }

    /* dense scoring == per-position ∞-gram probabilities */
    uint64_t num[MAXQ], den[MAXQ];
    int64_t slen[MAXQ];
    uint8_t sparse[MAXQ];
    rc = ig_score(f->ix, q, len, num, den, slen, fz_u8(in) & 1 ? sparse : NULL, err, sizeof err);
    FZ_CHECK(valid ? rc == IG_OK : rc == IG_ERR_ARG, "score rc %d", rc);
    for (int64_t i = 0; valid && i < n; i++) {
        ig_prob r;
        ig_infgram_prob(f->ix, q, i, q[i], &r, err, sizeof err);
        FZ_CHECK(r.count == num[i] && r.prompt_count == den[i] && r.suffix_len == slen[i],
                 "score position %lld: (%llu/%llu, %lld) vs prob (%llu/%llu, %lld)", (long long)i,
                 (unsigned long long)num[i], (unsigned long long)den[i], (long long)slen[i],
                 (unsigned long long)r.count, (unsigned long long)r.prompt_count, (long long)r.suffix_len);
    }
}

/* ------------------------------------------------------------------ batches */

static void op_batch(const fixture *f, fz_in *in) {
    static batch b;
    read_batch(in, f, &b);
    int ok = batch_offsets_ok(&b);
    for (int64_t i = 0; ok && i < b.n; i++) ok = batch_row_ok(f, &b, i);
    int threads = fz_u8(in) % 5;
    if (getenv("FZ_THREADS")) threads = atoi(getenv("FZ_THREADS"));
    uint64_t counts[16];
    int rc = ig_count_batch(f->ix, b.values, b.n_values, b.offsets, b.n, counts, threads, err, sizeof err);
    FZ_CHECK(ok ? rc == IG_OK : rc == IG_ERR_ARG, "count_batch rc %d ok %d: %s", rc, ok, err);
    for (int64_t i = 0; ok && i < b.n; i++)
        FZ_CHECK(counts[i] == ref_naive_count(&f->c, b.values + b.offsets[i], b.offsets[i + 1] - b.offsets[i]),
                 "count_batch row %lld", (long long)i);

    uint32_t tokens[16];
    for (int64_t i = 0; i < b.n; i++) tokens[i] = fz_tok(in, f->c.vocab);
    int tok_ok = 1;
    for (int64_t i = 0; i < b.n; i++) tok_ok &= tokens[i] < f->c.vocab;
    uint64_t cnt[16], pc[16];
    int64_t sl[16];
    uint8_t sp[16];
    int inf = fz_u8(in) & 1;
    rc = ig_prob_batch(f->ix, b.values, b.n_values, b.offsets, b.n, tokens, inf, cnt, pc, sl, sp, threads, err,
                       sizeof err);
    FZ_CHECK(ok && tok_ok ? rc == IG_OK : (b.n == 0 || rc == IG_ERR_ARG), "prob_batch rc %d", rc);
    for (int64_t i = 0; rc == IG_OK && i < b.n; i++) {
        ig_prob p;
        const uint32_t *q = b.values + b.offsets[i];
        int64_t len = b.offsets[i + 1] - b.offsets[i];
        (inf ? ig_infgram_prob : ig_ngram_prob)(f->ix, q, len, tokens[i], &p, err, sizeof err);
        FZ_CHECK(p.count == cnt[i] && p.prompt_count == pc[i] && p.suffix_len == sl[i] && p.sparse == sp[i],
                 "prob_batch row %lld", (long long)i);
    }

    static uint64_t num[8 * MAXQ], den[8 * MAXQ];
    static int64_t slen[8 * MAXQ];
    static uint8_t sparse[8 * MAXQ];
    static const int cancelled = 1; /* a cancelled call stops cleanly (or finishes first) */
    rc = ig_score_batch(f->ix, b.values, b.n_values, b.offsets, b.n, num, den, slen, sparse, threads, &cancelled,
                        err, sizeof err);
    FZ_CHECK(ok ? (rc == IG_OK || rc == IG_ERR_CANCELLED) : rc == IG_ERR_ARG, "cancelled score_batch rc %d", rc);
    rc = ig_score_batch(f->ix, b.values, b.n_values, b.offsets, b.n, num, den, slen, sparse, threads, NULL, err,
                        sizeof err);
    FZ_CHECK(ok ? rc == IG_OK : rc == IG_ERR_ARG, "score_batch rc %d", rc);
    for (int64_t i = 0; ok && i < b.n; i++) {
        int64_t a = b.offsets[i], len = b.offsets[i + 1] - a;
        uint64_t n1[MAXQ], d1[MAXQ];
        int64_t s1[MAXQ];
        ig_score(f->ix, b.values + a, len, n1, d1, s1, NULL, err, sizeof err);
        for (int64_t j = 0; j < len; j++)
            FZ_CHECK(n1[j] == num[a + j] && d1[j] == den[a + j] && s1[j] == slen[a + j], "score_batch row %lld",
                     (long long)i);
    }

    /* next-token distributions of the batch, copied with an arbitrary capacity */
    int64_t max_support = fz_u8(in) > 200 ? fz_len(in, 8) : 0;
    int mode = fz_u8(in) > 250 ? (int)fz_u32(in) : (int)(fz_u8(in) & 1);
    ig_ntd_batch *nb = NULL;
    rc = ig_ntd_batch_run(f->ix, b.values, b.n_values, b.offsets, b.n, mode, max_support, 0, threads, &nb, err,
                          sizeof err);
    int args_ok = ok && max_support >= 0 && (mode == IG_NTD_NGRAM || mode == IG_NTD_INFGRAM);
    FZ_CHECK(args_ok ? rc == IG_OK : rc == IG_ERR_ARG, "ntd_batch_run rc %d", rc);
    if (rc == IG_OK) {
        int64_t rows = ig_ntd_batch_rows(nb), entries = ig_ntd_batch_entries(nb);
        FZ_CHECK(rows == b.n, "rows");
        int64_t cap = fz_u8(in) & 1 ? entries : entries - 1 - fz_u8(in) % 3;
        if (cap < 0) cap = 0;
        int64_t *ro = malloc((size_t)(rows + 1) * sizeof *ro);
        uint32_t *tk = malloc((size_t)(cap ? cap : 1) * sizeof *tk);
        uint64_t *ct = malloc((size_t)(cap ? cap : 1) * sizeof *ct);
        int64_t rsl[16];
        uint64_t tot[16];
        uint8_t rsp[16], apx[16];
        rc = ig_ntd_batch_copy(nb, ro, tk, ct, cap, rsl, tot, rsp, apx, err, sizeof err);
        FZ_CHECK(cap >= entries ? rc == IG_OK : rc == IG_ERR_CAPACITY, "ntd_batch_copy rc %d", rc);
        if (getenv("FZ_DEBUG") && rc == IG_OK) {
            fprintf(stderr, "batch n_values %lld offsets:", (long long)b.n_values);
            for (int64_t i = 0; i <= b.n; i++) fprintf(stderr, " %lld", (long long)b.offsets[i]);
            fprintf(stderr, "\nvalues:");
            for (int64_t i = 0; i < b.n_values; i++) fprintf(stderr, " %u", b.values[i]);
            fprintf(stderr, "\nentries:");
            for (int64_t i = 0; i < entries; i++) fprintf(stderr, " %u:%llu", tk[i], (unsigned long long)ct[i]);
            fprintf(stderr, "\n");
        }
        for (int64_t i = 0; rc == IG_OK && i < rows; i++) {
            const uint32_t *q = b.values + b.offsets[i];
            int64_t len = b.offsets[i + 1] - b.offsets[i], d = rsl[i];
            FZ_CHECK(mode == IG_NTD_INFGRAM ? d == ref_naive_suffix(&f->c, q, len, len) : d == len, "row suffix");
            FZ_CHECK(tot[i] == ref_naive_count(&f->c, q + len - d, d), "row total");
            if (getenv("FZ_DEBUG")) {
                fprintf(stderr, "row %lld mode %d support %lld d %lld total %llu approx %d entries %lld ctx:",
                        (long long)i, mode, (long long)max_support, (long long)d, (unsigned long long)tot[i], apx[i],
                        (long long)(ro[i + 1] - ro[i]));
                for (int64_t j = 0; j < len; j++) fprintf(stderr, " %u", q[j]);
                fprintf(stderr, " ->");
                for (int64_t j = ro[i]; j < ro[i + 1]; j++) fprintf(stderr, " %u:%llu", tk[j], (unsigned long long)ct[j]);
                fprintf(stderr, " (threads %d, rows %lld)\n", threads, (long long)rows);
            }
            if (!apx[i]) check_ntd(f, q + len - d, d, tk + ro[i], ct + ro[i], ro[i + 1] - ro[i], tot[i]);
        }
        free(ro);
        free(tk);
        free(ct);
        ig_ntd_batch_free(nb);
    }
    /* a run capped at max_entries = cap (0: no cap), copied out with that capacity */
    int64_t cap = fz_len(in, 64);
    if (cap < 0 || cap > 100000) cap = 0;
    int64_t ro[17], rsl[16];
    uint64_t tot[16];
    uint32_t *tk = malloc((size_t)(cap ? cap : 1) * sizeof *tk);
    uint64_t *ct = malloc((size_t)(cap ? cap : 1) * sizeof *ct);
    nb = NULL;
    rc = ig_ntd_batch_run(f->ix, b.values, b.n_values, b.offsets, b.n, IG_NTD_INFGRAM, max_support, cap, threads, &nb,
                          err, sizeof err);
    FZ_CHECK(ok && max_support >= 0 ? (rc == IG_OK || (rc == IG_ERR_LIMIT && cap > 0)) : rc == IG_ERR_ARG,
             "capped ntd_batch_run rc %d", rc);
    FZ_CHECK(rc == IG_OK || !nb, "a failed run holds no batch");
    if (rc == IG_OK) {
        int64_t e = ig_ntd_batch_entries(nb);
        FZ_CHECK(cap == 0 || e <= cap, "capped run holds %lld entries, cap %lld", (long long)e, (long long)cap);
        rc = ig_ntd_batch_copy(nb, ro, tk, ct, cap, rsl, tot, NULL, NULL, err, sizeof err);
        FZ_CHECK(e <= cap ? rc == IG_OK : rc == IG_ERR_CAPACITY, "copy rc %d", rc);
        ig_ntd_batch_free(nb);
    }
    free(tk);
    free(ct);
}

/* ------------------------------------------------------------------ decoding states */

static void read_state(fz_in *in, const fixture *f, int64_t *st) {
    int64_t size = ig_state_size(f->ix);
    uint32_t q[MAXQ];
    int64_t len, n = read_query(in, f, q, &len);
    if (ig_state_init(f->ix, q, n, st, size, err, sizeof err) != IG_OK) memset(st, 0, (size_t)size * sizeof *st);
    uint8_t k = fz_u8(in);
    if (k > 200) st[fz_u8(in) % size] = fz_len(in, 100); /* forge a field */
    if (k > 250)
        for (int64_t i = 0; i < size; i++) st[i] = (int64_t)fz_u64(in);
}

static int state_ok(const fixture *f, const int64_t *st) {
    uint64_t c = 0;
    for (int s = 0; s < f->c.n_shards; s++) {
        int64_t lo = st[2 + 2 * s], hi = st[3 + 2 * s];
        uint64_t total_shard = 0;
        ig_shard_info(f->ix, s, &total_shard, &(uint64_t){0}, &(uint64_t){0}, &(int){0});
        if (lo < 0 || hi < lo || hi > (int64_t)total_shard) return 0;
        c += (uint64_t)(hi - lo);
    }
    return st[0] >= 0 && st[0] <= IG_MAX_SHARD_TOKENS && (int64_t)c == st[1] && !(c == 0 && st[0] > 0);
}

static void op_state(const fixture *f, fz_in *in) {
    int64_t st[8], out[8], out2[8];
    read_state(in, f, st);
    uint32_t ctx[MAXQ + 1];
    int64_t len, n = read_query(in, f, ctx, &len);
    int rc = ig_state_extend(f->ix, st, ig_state_size(f->ix), ctx, len, out, err, sizeof err);
    if (rc == IG_OK) FZ_CHECK(state_ok(f, out), "extend produced a bad state");
    uint32_t token = fz_tok(in, f->c.vocab);
    ig_prob p;
    rc = ig_state_prob(f->ix, st, ig_state_size(f->ix), token, &p, err, sizeof err);
    if (state_ok(f, st) && token < f->c.vocab) FZ_CHECK(rc == IG_OK, "state_prob rc %d", rc);
    /* a real context: state + extension == state of the longer context, and prob == infgram_prob */
    if (len >= 1 && ref_valid_ids(&f->c, ctx, n)) {
        ig_state_init(f->ix, ctx, n - 1, st, ig_state_size(f->ix), err, sizeof err);
        FZ_CHECK(ig_state_extend(f->ix, st, ig_state_size(f->ix), ctx, n, out, err, sizeof err) == IG_OK, "extend: %s",
                 err);
        ig_state_init(f->ix, ctx, n, out2, ig_state_size(f->ix), err, sizeof err);
        FZ_CHECK(!memcmp(out, out2, (size_t)ig_state_size(f->ix) * sizeof *out), "extend != init");
        if (token < f->c.vocab) {
            ig_prob a, b;
            ig_state_prob(f->ix, out, ig_state_size(f->ix), token, &a, err, sizeof err);
            ig_infgram_prob(f->ix, ctx, n, token, &b, err, sizeof err);
            FZ_CHECK(a.count == b.count && a.prompt_count == b.prompt_count && a.suffix_len == b.suffix_len &&
                     a.sparse == b.sparse, "state_prob != infgram_prob");
        }
    }
    /* batches of (possibly forged) states */
    int64_t size = ig_state_size(f->ix), ns = fz_u8(in) % 5;
    int64_t states[5 * 8], outs[5 * 8];
    static batch b;
    b.n = ns;
    b.n_values = 0;
    b.offsets[0] = 0;
    for (int64_t i = 0; i < ns; i++) {
        read_state(in, f, states + i * size);
        int64_t pass, m = read_query(in, f, b.values + b.n_values, &pass);
        b.n_values += m;
        b.offsets[i + 1] = b.n_values;
    }
    int threads = fz_u8(in) % 4;
    rc = ig_state_extend_batch(f->ix, states, ns * size, b.values, b.n_values, b.offsets, ns, outs, threads, err,
                               sizeof err);
    for (int64_t i = 0; rc == IG_OK && i < ns; i++) FZ_CHECK(state_ok(f, outs + i * size), "extend_batch state");
    uint32_t tokens[5];
    uint64_t cnt[5], pc[5];
    int64_t sl[5];
    for (int64_t i = 0; i < ns; i++) tokens[i] = fz_tok(in, f->c.vocab);
    ig_state_prob_batch(f->ix, states, ns * size, ns, tokens, cnt, pc, sl, NULL, threads, err, sizeof err);
    ig_ntd_batch *nb = NULL;
    rc = ig_ntd_batch_states(f->ix, states, ns * size, ns, fz_u8(in) > 200 ? fz_len(in, 8) : 0, 0, threads, &nb, err,
                             sizeof err);
    if (rc == IG_OK) {
        int64_t e = ig_ntd_batch_entries(nb);
        int64_t *ro = malloc((size_t)(ns + 1) * sizeof *ro);
        uint32_t *tk = malloc((size_t)(e ? e : 1) * sizeof *tk);
        uint64_t *ct = malloc((size_t)(e ? e : 1) * sizeof *ct);
        FZ_CHECK(ig_ntd_batch_copy(nb, ro, tk, ct, e, NULL, NULL, NULL, NULL, err, sizeof err) == IG_OK, "copy");
        free(ro);
        free(tk);
        free(ct);
        ig_ntd_batch_free(nb);
    }
    {
        uint32_t dt[16];
        uint64_t dc[16], dtot[16], total;
        int64_t nd = 0, k = fz_len(in, 6), child[6 * 8];
        if (k > 6) k = 6;
        ig_draft_chain(f->ix, st, ig_state_size(f->ix), fz_u8(in) % 17, fz_u8(in) % 4, fz_double(in), fz_double(in),
                       (int64_t)(int8_t)fz_u8(in), dt, dc, dtot, &nd, err, sizeof err);
        FZ_CHECK(nd >= 0 && nd <= 16, "draft_chain n_out");
        ig_draft_children(f->ix, st, ig_state_size(f->ix), k, dt, dc, fz_u8(in) & 1 ? child : NULL, &total, &nd, err,
                          sizeof err);
        int64_t n_new = fz_len(in, 4);
        ig_draft_advance(f->ix, st, ig_state_size(f->ix), ctx, n, n_new, out, err, sizeof err);
        int64_t seq[MAXQ], dout[16], dn, dpos;
        for (int64_t i = 0; i < n; i++) seq[i] = ctx[i] % 4;
        ig_draft_lookup(seq, n, fz_len(in, 4), fz_len(in, 8), fz_u8(in) % 17, dout, &dn, &dpos);
    }
}

/* ------------------------------------------------------------------ document search */

/* Does doc d contain term t? Positions into pos (its start offsets), returns how many. */
static int64_t term_positions(const ref_corpus *c, int64_t d, const uint32_t *t, int64_t len, int64_t *pos,
                              int64_t cap) {
    const uint32_t *x = c->ids + c->offsets[d];
    int64_t dl = c->offsets[d + 1] - c->offsets[d], n = 0;
    for (int64_t p = 0; p + len <= dl; p++)
        if (!memcmp(x + p, t, (size_t)len * sizeof *t) && n < cap) pos[n++] = p;
    return n;
}

static int naive_match(const ref_corpus *c, int64_t d, const uint32_t *ids, const int64_t *toff,
                       const int64_t *coff, int64_t nc, int64_t D) {
    static int64_t pos[256][64];
    static int64_t npos[256];
    for (int64_t cl = 0; cl < nc; cl++) {
        int any = 0;
        for (int64_t t = coff[cl]; t < coff[cl + 1]; t++) {
            npos[t] = term_positions(c, d, ids + toff[t], toff[t + 1] - toff[t], pos[t], 64);
            any |= npos[t] > 0;
        }
        if (!any) return 0;
    }
    if (D < 0) return 1;
    for (int64_t t0 = 0; t0 < coff[nc]; t0++) /* a window starting at an occurrence */
        for (int64_t k = 0; k < npos[t0]; k++) {
            int64_t a = pos[t0][k], all = 1;
            for (int64_t cl = 0; cl < nc && all; cl++) {
                int hit = 0;
                for (int64_t t = coff[cl]; t < coff[cl + 1] && !hit; t++)
                    for (int64_t j = 0; j < npos[t] && !hit; j++) hit = pos[t][j] >= a && pos[t][j] - a <= D;
                all = hit;
            }
            if (all) return 1;
        }
    return 0;
}

static void op_search(const fixture *f, fz_in *in) {
    uint32_t ids[256];
    int64_t toff[20], coff[10], nids = 0;
    int64_t nc = 1 + fz_u8(in) % 4, nt = 0;
    coff[0] = 0;
    for (int64_t cl = 0; cl < nc; cl++) {
        int64_t k = 1 + fz_u8(in) % 3;
        for (int64_t j = 0; j < k; j++) {
            toff[nt++] = nids;
            int64_t len, m = read_query(in, f, ids + nids, &len);
            if (m > 6) m = 6;
            if (m == 0 && fz_u8(in) < 200) ids[nids] = fz_tok(in, f->c.vocab), m = 1;
            nids += m;
        }
        coff[cl + 1] = nt;
    }
    toff[nt] = nids;
    if (fz_u8(in) > 240) coff[fz_u8(in) % (nc + 1)] = fz_len(in, nt); /* forge the layout */
    if (fz_u8(in) > 245) {                                            /* (within the ids buffer) */
        int64_t v = fz_len(in, nids);
        toff[fz_u8(in) % (nt + 1)] = v > nids ? nids : v;
    }
    int64_t pass_nc = fz_u8(in) > 250 ? fz_len(in, 80) : nc;
    int64_t pass_nt = fz_u8(in) > 250 ? fz_len(in, 300) : nt;
    if (pass_nt > nt && pass_nt <= IG_SEARCH_MAX_TERMS) pass_nt = nt; /* term_off has nt + 1 entries */
    if (pass_nc > nc && pass_nc <= IG_SEARCH_MAX_CLAUSES) pass_nc = nc;
    /* what the core must accept: check_cnf's rules, restated */
    int structure_ok = pass_nt >= 1 && pass_nt <= IG_SEARCH_MAX_TERMS && pass_nc >= 1 &&
                       pass_nc <= IG_SEARCH_MAX_CLAUSES;
    for (int64_t t = 0; structure_ok && t < pass_nt; t++)
        structure_ok = toff[t] >= 0 && toff[t + 1] > toff[t] &&
                       ref_valid_ids(&f->c, ids + toff[t], toff[t + 1] - toff[t]);
    if (structure_ok) structure_ok = coff[0] == 0 && coff[pass_nc] == pass_nt;
    for (int64_t c = 0; structure_ok && c < pass_nc; c++) structure_ok = coff[c + 1] > coff[c];
    ig_search_opts o;
    o.max_clause_freq = fz_u8(in) > 230 ? fz_u64(in) : 1 + fz_u8(in) % 200;
    o.max_diff_tokens = fz_u8(in) & 1 ? -1 : fz_len(in, 20);
    o.seed = fz_u64(in);
    o.check = fz_u8(in) > 250 ? (int)fz_u32(in) : fz_u8(in) % 3;
    int64_t cap = fz_len(in, 40);
    if (cap < 0 || cap > 1000) cap = 0;
    int64_t *docs = malloc((size_t)(cap ? cap : 1) * sizeof *docs), n_out = -1;
    ig_search_stats stats;
    int rc = ig_search_docs(f->ix, ids, toff, pass_nt, coff, pass_nc, &o, docs, cap, &n_out, &stats, err,
                            sizeof err);
    int ok = structure_ok && o.max_clause_freq >= 1 && o.max_clause_freq <= IG_SEARCH_MAX_CLAUSE_FREQ && o.check >= 0 &&
             o.check <= 2 && o.max_diff_tokens >= -1;
    FZ_CHECK(ok ? rc == IG_OK : rc != IG_OK, "search rc %d (ok %d): %s", rc, ok, err);
    if (rc == IG_OK) {
        uint64_t matches = 0;
        int64_t k = 0;
        for (int64_t d = 0; d < f->c.n_docs; d++) {
            if (!naive_match(&f->c, d, ids, toff, coff, pass_nc, o.max_diff_tokens)) {
                for (int64_t j = 0; j < n_out; j++) FZ_CHECK(docs[j] != d, "search found non-matching doc %lld", (long long)d);
                continue;
            }
            matches++;
            if (!stats.approximate && k < n_out) {
                FZ_CHECK(docs[k] == d, "search doc %lld: got %lld", (long long)d, (long long)docs[k]);
                k++;
            }
        }
        if (!stats.approximate)
            FZ_CHECK(stats.num_matches == matches && n_out == (cap < (int64_t)matches ? cap : (int64_t)matches),
                     "search found %llu docs, naive %llu", (unsigned long long)stats.num_matches,
                     (unsigned long long)matches);
    }
    free(docs);

    /* spans of one document */
    int64_t doc = fz_len(in, f->c.n_docs), shard = 0;
    if (doc >= 0 && doc < f->c.n_docs)
        while (doc >= f->c.shard_doc[shard + 1]) shard++;
    int64_t local = doc >= 0 && doc < f->c.n_docs ? doc - f->c.shard_doc[shard] : doc;
    int64_t scap = fz_len(in, 30);
    if (scap < 0 || scap > 4096) scap = 0;
    int64_t *offs = malloc((size_t)(scap ? scap : 1) * sizeof *offs);
    int32_t *terms = malloc((size_t)(scap ? scap : 1) * sizeof *terms);
    int pass_shard = fz_u8(in) > 250 ? (int)fz_u32(in) : (int)shard;
    rc = ig_doc_spans(f->ix, pass_shard, local, ids, toff, pass_nt, offs, terms, scap, &n_out, err, sizeof err);
    if (rc == IG_OK || rc == IG_ERR_CAPACITY) { /* all of them, or the first scap (cut) */
        doc = f->c.shard_doc[pass_shard] + local; /* the document the core looked at */
        int64_t k = 0;
        for (int64_t p = 0; p < f->c.offsets[doc + 1] - f->c.offsets[doc]; p++)
            for (int64_t t = 0; t < pass_nt; t++) {
                int64_t len = toff[t + 1] - toff[t], pos;
                const uint32_t *x = f->c.ids + f->c.offsets[doc];
                if (p + len > f->c.offsets[doc + 1] - f->c.offsets[doc] ||
                    memcmp(x + p, ids + toff[t], (size_t)len * sizeof *ids))
                    continue;
                (void)pos;
                FZ_CHECK(k >= n_out || (offs[k] == p && terms[k] == t), "doc_spans entry %lld", (long long)k);
                k++;
            }
        FZ_CHECK(rc == IG_OK ? k == n_out : (n_out == scap && k > n_out), "doc_spans count");
    }
    free(offs);
    free(terms);
}

/* ------------------------------------------------------------------ documents */

static void op_docs(const fixture *f, fz_in *in) {
    int shard = fz_u8(in) > 240 ? (int)fz_u32(in) : fz_u8(in) % 4;
    int64_t doc = fz_len(in, 20), pos = fz_len(in, 250), cap = fz_len(in, 64), d = -1, off = -1, len = -1;
    if (cap < 0 || cap > 4096) cap = 0;
    uint32_t *out = malloc((size_t)(cap ? cap : 1) * sizeof *out);
    int rc = ig_get_doc(f->ix, shard, doc, out, cap, &len, err, sizeof err);
    if (rc == IG_OK) {
        int64_t g = f->c.shard_doc[shard] + doc;
        FZ_CHECK(len == f->c.offsets[g + 1] - f->c.offsets[g] &&
                 !memcmp(out, f->c.ids + f->c.offsets[g], (size_t)len * sizeof *out), "get_doc");
    }
    free(out);
    rc = ig_locate(f->ix, shard, pos, &d, &off, err, sizeof err);
    if (rc == IG_OK) FZ_CHECK(d >= 0 && off >= 0, "locate");
    ig_sa_position(f->ix, shard, pos, &d, err, sizeof err);
    uint64_t a, b, c;
    int w;
    ig_shard_info(f->ix, shard, &a, &b, &c, &w);
}

/* ------------------------------------------------------------------ index difference */

static void op_diff(const fixture *f, fz_in *in) {
    uint32_t q[MAXQ];
    int64_t len, n = read_query(in, f, q, &len);
    int valid = len >= 0 && ref_valid_ids(&f->c, q, n);
    /* plus minus minus, or (rarely) the reverse, which is not a subset */
    int rev = fz_u8(in) > 240;
    const ig_index *P = rev ? f->mx : f->ix, *M = rev ? f->ix : f->mx;
    const ref_corpus *pc = rev ? &f->minus : &f->c, *mc = rev ? &f->c : &f->minus;
    uint64_t count;
    int rc = ig_diff_count(P, M, q, len, &count, err, sizeof err);
    if (valid) {
        int64_t net = (int64_t)ref_naive_count(pc, q, n) - (int64_t)ref_naive_count(mc, q, n);
        FZ_CHECK(net < 0 ? rc == IG_ERR_ARG : (rc == IG_OK && (int64_t)count == net), "diff_count");
    }
    int64_t cap = fz_len(in, 12);
    if (cap < 0 || cap > 4096) cap = 0;
    uint32_t *toks = malloc((size_t)(cap ? cap : 1) * sizeof *toks);
    uint64_t *cnts = malloc((size_t)(cap ? cap : 1) * sizeof *cnts), total;
    int64_t n_out;
    ig_diff_ntd(P, M, q, len, toks, cnts, cap, &n_out, &total, err, sizeof err);
    free(toks);
    free(cnts);
    int64_t sl;
    ig_diff_infgram_suffix(P, M, q, len, &sl, err, sizeof err);
    ig_prob p;
    uint32_t token = fz_tok(in, f->c.vocab);
    ig_diff_infgram_prob(P, M, q, len, token, &p, err, sizeof err);
    ig_diff_ngram_prob(P, M, q, len, token, &p, err, sizeof err);
    uint64_t num[MAXQ], den[MAXQ];
    int64_t slen[MAXQ];
    rc = ig_diff_score(P, M, q, len, num, den, slen, NULL, NULL, err, sizeof err);
    if (!rev && valid) FZ_CHECK(rc == IG_OK, "diff_score: %s", err);
    if (fz_u8(in) > 250) ig_diff_check(P, M, err, sizeof err);
    /* drafts over the difference, from the state of q, sometimes forged */
    int64_t size = ig_diff_state_size(P, M);
    int64_t *st = calloc((size_t)size, sizeof *st), *child = malloc((size_t)(7 * size) * sizeof *child);
    if (!st || !child) {
        free(st);
        free(child);
        return;
    }
    rc = ig_diff_state_init(P, M, q, len, st, ig_diff_state_size(P, M), err, sizeof err);
    if (!rev && valid) FZ_CHECK(rc == IG_OK, "diff_state_init: %s", err);
    if (fz_u8(in) > 220) st[fz_u8(in) % size] += (int64_t)(int8_t)fz_u8(in);
    uint32_t dt[16];
    uint64_t dc[16], dtot[16];
    int64_t nd = 0, k = fz_u8(in) % 7;
    ig_diff_draft_chain(P, M, st, ig_diff_state_size(P, M), fz_u8(in) % 17, fz_u8(in) % 4, fz_double(in), fz_double(in),
                        (int64_t)(int8_t)fz_u8(in), dt, dc, dtot, &nd, err, sizeof err);
    FZ_CHECK(nd >= 0 && nd <= 16, "diff_draft_chain n_out");
    ig_diff_draft_children(P, M, st, ig_diff_state_size(P, M), k, dt, dc, fz_u8(in) & 1 ? child : NULL, &total, &nd,
                           err, sizeof err);
    int64_t tt[8], tp[8];
    double pr[8];
    ig_diff_draft_tree(P, M, st, ig_diff_state_size(P, M), fz_u8(in) % 9, fz_u8(in) % 5, fz_u8(in) % 4, fz_double(in),
                       (int64_t)(int8_t)fz_u8(in), tt, tp, pr, &nd, err, sizeof err);
    int64_t seq[MAXQ], dout[16], match, n_new = fz_len(in, 4);
    int src;
    for (int64_t i = 0; i < n; i++) seq[i] = fz_u8(in) > 240 ? (int64_t)fz_u32(in) : (int64_t)q[i];
    ig_draft_params prm = {fz_u8(in) % 17, fz_u8(in) % 4, fz_u8(in) / 32.0, fz_u8(in) % 3, fz_double(in), fz_double(in),
                           fz_u8(in) % 4, fz_u8(in) % 9, fz_u8(in) % 6, (int64_t)(int8_t)fz_u8(in), -1, -1};
    ig_diff_draft_step(P, M, st, ig_diff_state_size(P, M), seq, n, n_new, &prm, fz_u8(in) % 17, dout, dc, dtot, &nd,
                       &match, &src, err, sizeof err);
    FZ_CHECK(nd >= 0 && nd <= 16, "diff_draft_step n_out");
    free(st);
    free(child);
}

/* ------------------------------------------------------------------ the LM */

static void read_config(fz_in *in, ig_lm_config *c, double *params, int64_t maxc) {
    memset(c, 0, sizeof *c);
    c->method = fz_u8(in) > 250 ? (int)fz_u32(in) : fz_u8(in) % 3;
    c->max_context = fz_u8(in) > 245 ? fz_len(in, 40) : fz_u8(in) % (maxc + 1);
    c->eod = fz_u8(in) & 1;
    c->k = (int)(int8_t)fz_u8(in);
    c->decay = fz_u8(in) > 240 ? fz_double(in) : 0.5 + fz_u8(in) / 100.0;
    c->floor = fz_u8(in) > 240 ? fz_double(in) : 0;
    ig_lm_smooth *m = &c->smooth;
    m->max_depth = fz_u8(in) > 245 ? fz_len(in, 40) : fz_u8(in) % (maxc + 1);
    m->raw_top = fz_u8(in) & 1;
    m->raw_all = fz_u8(in) & 1;
    m->witten_bell = fz_u8(in) & 1;
    m->n_params = 1 + fz_u8(in) % 4;
    for (int i = 0; i < 16; i++) params[i] = fz_u8(in) > 230 ? fz_double(in) : (double)(fz_u8(in) % 100) / 100.0;
    m->d1 = params;
    m->d2 = params + 4;
    m->d3 = params + 8;
    m->theta = params + 12;
}

static int lm_heavy; /* dense sampling steps left for this input on the big vocabulary */

static void op_lm(fixture *f, fz_in *in) {
    ig_lm_config cfg;
    double params[16];
    read_config(in, &cfg, params, 24);
    ig_lm *lm = f->lm;
    int pick = fz_u8(in), diff = 0, rev = 0;
    if (pick > 250) { /* a fresh handle with its own cap */
        if (ig_lm_new(&lm, f->ix, fz_len(in, 8), fz_len(in, 100), err, sizeof err) != IG_OK) return;
    } else if (pick == 250) { /* over the reverse difference, which is not a subset: errors, no crash */
        rev = diff = 1;
        if (ig_diff_lm_new(&lm, f->mx, f->ix, fz_len(in, 8), fz_len(in, 100), err, sizeof err) != IG_OK) return;
    } else if (pick > 225) { /* over the index minus a subset of its documents: the same invariants */
        diff = 1;
        lm = f->dlm;
    }
    uint32_t q[MAXQ];
    int64_t len, n = read_query(in, f, q, &len);
    int valid = len >= 0 && ref_valid_ids(&f->c, q, n);
    double prob[MAXQ];
    int64_t sl[MAXQ];
    uint8_t sp[MAXQ];
    int rc = ig_lm_score(lm, &cfg, q, len, prob, sl, sp, err, sizeof err);
    if (rc == IG_OK && !rev) {
        FZ_CHECK(valid, "lm_score accepted bad ids");
        for (int64_t i = 0; i < n; i++)
            FZ_CHECK(prob[i] >= 0 && prob[i] <= 1 + 1e-9, "lm_score prob[%lld] = %g (method %d)", (long long)i,
                     prob[i], cfg.method);
    }
    size_t slots = (size_t)f->c.vocab + 1;
    double *dist = malloc(slots * sizeof *dist);
    rc = ig_lm_distribution(lm, &cfg, q, len, dist, err, sizeof err);
    if (rc == IG_OK && !rev) {
        double sum = 0;
        for (size_t i = 0; i < slots; i++) {
            FZ_CHECK(dist[i] >= 0 && dist[i] <= 1 + 1e-9, "distribution[%zu] = %g", i, dist[i]);
            sum += dist[i];
        }
        FZ_CHECK(fabs(sum - 1) < 1e-6, "distribution sums to %.12g (method %d)", sum, cfg.method);
    }
    free(dist);
    int64_t rows_cap = fz_len(in, 60), rows = -1, next = -1;
    if (rows_cap < 0 || rows_cap > 4096) rows_cap = 0;
    int64_t *out = malloc((size_t)(rows_cap ? rows_cap : 1) * IG_LM_NSTAT * sizeof *out);
    int64_t begin = fz_len(in, n), end = fz_len(in, n);
    ig_lm_levels(lm, q, len, begin, end, fz_len(in, 30), fz_u8(in) & 1, fz_u8(in) & 1, out, rows_cap, &rows, &next,
                 err, sizeof err);
    free(out);
    ig_lm_sampling smp = {fz_u8(in) & 1, fz_u8(in) > 240 ? fz_double(in) : 1.0, fz_len(in, 5),
                          fz_u8(in) > 200 ? fz_double(in) : 1.0};
    uint64_t rng[4] = {fz_u64(in), fz_u64(in), 1, 2};
    uint32_t stop[3] = {fz_tok(in, f->c.vocab), fz_tok(in, f->c.vocab), 0}, gen[32];
    int64_t gsl[32], gn = -1;
    uint64_t gm[32];
    int ended = -1;
    int64_t max_new = fz_len(in, 32);
    if (max_new > 32) max_new = 32;
    /* top-k / top-p / temperature sort the whole vocabulary per token: keep the big-vocabulary
       fixture to a few such tokens per input (the 10 s timeout is for hangs, not for this) */
    if (f->c.vocab > 4096 && max_new > 2) max_new = lm_heavy-- > 0 ? 2 : 0;
    rc = ig_lm_generate(lm, &cfg, &smp, q, len, max_new, rng, stop, fz_u8(in) % 4, gen, gsl, gm, &gn, &ended, err,
                        sizeof err);
    if (rc == IG_OK) {
        FZ_CHECK(gn >= 0 && gn <= max_new && ended >= 0 && ended <= 2, "generate outputs");
        for (int64_t i = 0; i < gn; i++) FZ_CHECK(gen[i] < f->c.vocab, "generated id %u", gen[i]);
    }
    if (fz_u8(in) > 250) {
        int64_t max_n = fz_len(in, 5), kmax = fz_len(in, 5);
        if (max_n >= 0 && max_n <= 8 && kmax >= 0 && kmax <= 8) {
            uint64_t raw[64], cont[64], types[8];
            if (diff) ig_diff_lm_count_of_counts(rev ? f->mx : f->ix, rev ? f->ix : f->mx, max_n, kmax, raw, cont,
                                                 types, err, sizeof err);
            else ig_lm_count_of_counts(f->ix, max_n, kmax, raw, cont, types, err, sizeof err);
        }
    }
    if (lm != f->lm && lm != f->dlm) ig_lm_free(lm);
}

/* ------------------------------------------------------------------ the program */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size, 0};
    fixture *f = &fx[fz_u8(&in) % 3];
    lm_heavy = 2;
    for (int ops = 0; fz_more(&in) && ops < 64; ops++) {
        switch (fz_u8(&in) % 7) {
        case 0: op_single(f, &in); break;
        case 1: op_batch(f, &in); break;
        case 2: op_state(f, &in); break;
        case 3: op_search(f, &in); break;
        case 4: op_docs(f, &in); break;
        case 5: op_diff(f, &in); break;
        default: op_lm(f, &in); break;
        }
    }
    return 0;
}
