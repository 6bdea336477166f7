/* ntd_batch.c - next-token distributions of a whole batch, held in C until copied out.
 *
 * Each worker thread appends its rows' (token, count) lists to its own growable store and
 * records where each row landed; copying gathers the rows in order into the caller's CSR
 * arrays. Sizes are known before the caller allocates, so no buffer is ever too small and no
 * row is computed twice.
 */
#include <stdio.h>
#include <stdlib.h>

#include "batch_internal.h"
#include "ntd_cache.h"
#include "parallel.h"
#include "shard_pool.h"
#include "state_internal.h"

typedef struct {
    uint32_t *tok;
    uint64_t *cnt;
    int64_t n, cap;
} tc_buf;

static int tc_reserve(tc_buf *b, int64_t need) {
    if (need <= b->cap) return 0;
    int64_t c = b->cap ? b->cap : 1024;
    while (c < need) c *= 2;
    uint32_t *t = realloc(b->tok, (size_t)c * sizeof *t);
    if (!t) return IG_ERR_NOMEM;
    b->tok = t;
    uint64_t *n = realloc(b->cnt, (size_t)c * sizeof *n);
    if (!n) return IG_ERR_NOMEM;
    b->cnt = n;
    b->cap = c;
    return 0;
}

static void tc_free(tc_buf *b) {
    free(b->tok);
    free(b->cnt);
    b->tok = NULL;
    b->cnt = NULL;
    b->n = b->cap = 0;
}

typedef struct {
    int64_t start, n, suffix_len;
    uint64_t total;
    int32_t tid;
    uint8_t sparse, approximate;
} ntd_row;

struct ig_ntd_batch {
    int64_t rows, entries;
    int n_threads;
    ntd_row *row;
    tc_buf *store; /* one per thread */
};

/* ---------------------------------------------------------------- one context */

/* Is the exact distribution of r at depth d available without a walk? */
static int stored_exactly(const ig_shard *s, ig_range r, int64_t d) {
    int64_t m;
    if (d == 0 && r.lo == 0 && r.hi == s->num_tokens) return 1;
    return d >= 1 && d <= IG_NTC_MAX_DEPTH && s->ntc_n && ig_ntc_find(s, d, r, &m) != NULL;
}

/* Append shard s's distribution of r at depth d to dst: exact, or sampled every `stride` ranks
   (each sample standing for the ranks up to the next one) when stride > 0. Sets *approx. */
static int walk_into(const ig_index *ix, const ig_shard *s, ig_range r, int64_t d, int64_t stride, tc_buf *dst,
                     int *approx) {
    int w = ix->token_width;
    if (r.hi <= r.lo) return 0;
    if (stride > 1 && !stored_exactly(s, r, d)) {
        *approx = 1;
        if (tc_reserve(dst, dst->n + (r.hi - r.lo + stride - 1) / stride)) return IG_ERR_NOMEM;
        const int64_t first = dst->n; /* dst may already hold earlier rows: never merge into them */
        for (int64_t k = r.lo; k < r.hi; k += stride) {
            uint32_t t = tok_rank(s, w, k, d);
            uint64_t weight = (uint64_t)(k + stride <= r.hi ? stride : r.hi - k);
            if (dst->n > first && dst->tok[dst->n - 1] == t) dst->cnt[dst->n - 1] += weight;
            else { dst->tok[dst->n] = t; dst->cnt[dst->n++] = weight; }
        }
        if (s->official) { /* (its runs come in key order) */
            int64_t m = ig_sort_merge_tc(dst->tok + first, dst->cnt + first, dst->n - first);
            if (m < 0) return IG_ERR_NOMEM;
            dst->n = first + m;
        }
        return 0;
    }
    int64_t cap = r.hi - r.lo; /* every distinct token takes at least one rank */
    if (cap > (int64_t)ix->vocab_size + 1) cap = (int64_t)ix->vocab_size + 1;
    if (tc_reserve(dst, dst->n + cap)) return IG_ERR_NOMEM;
    int64_t m = ig_walk_range(s, w, r, d, dst->tok + dst->n, dst->cnt + dst->n, cap);
    if (m > cap) { /* only a corrupt token array holds ids beyond the vocabulary */
        if (tc_reserve(dst, dst->n + m)) return IG_ERR_NOMEM;
        m = ig_walk_range(s, w, r, d, dst->tok + dst->n, dst->cnt + dst->n, m);
    }
    dst->n += m;
    return 0;
}

/* Merge sorted lists a and b (summing equal tokens) into out (overwritten). */
static int merge_tc(const tc_buf *a, const tc_buf *b, tc_buf *out) {
    if (tc_reserve(out, a->n + b->n)) return IG_ERR_NOMEM;
    int64_t i = 0, j = 0, n = 0;
    while (i < a->n || j < b->n) {
        if (j >= b->n || (i < a->n && a->tok[i] < b->tok[j])) { out->tok[n] = a->tok[i]; out->cnt[n++] = a->cnt[i++]; }
        else if (i >= a->n || b->tok[j] < a->tok[i]) { out->tok[n] = b->tok[j]; out->cnt[n++] = b->cnt[j++]; }
        else { out->tok[n] = a->tok[i]; out->cnt[n++] = a->cnt[i++] + b->cnt[j++]; }
    }
    out->n = n;
    return 0;
}

typedef struct {
    tc_buf acc, tmp;
    tc_buf *per; /* per shard: its walk (allocated at the first multi-shard row) */
    int *per_rc, *per_approx;
} ntd_scratch;

static void ntd_scratch_free(ntd_scratch *sc, int n_shards) {
    tc_free(&sc->acc);
    tc_free(&sc->tmp);
    for (int i = 0; sc->per && i < n_shards; i++) tc_free(&sc->per[i]);
    free(sc->per);
    free(sc->per_rc);
    free(sc->per_approx);
}

typedef struct {
    const ig_index *ix;
    const ig_range *rs;
    int64_t d, stride;
    ntd_scratch *sc;
} walk_step;

static void walk_one(void *ctx, int i) {
    walk_step *w = ctx;
    w->sc->per[i].n = 0;
    w->sc->per_approx[i] = 0;
    w->sc->per_rc[i] = walk_into(w->ix, &w->ix->shards[i], w->rs[i], w->d, w->stride, &w->sc->per[i],
                                 &w->sc->per_approx[i]);
}

/* Append the distribution of the context with per-shard ranges rs at depth d to out. Several
   shards are walked each into its own buffer (at once when the index is cold: shard_pool.h),
   then merged in shard order. */
static int collect_ntd(const ig_index *ix, const ig_range *rs, int64_t d, uint64_t total, int64_t max_support,
                       tc_buf *out, ntd_scratch *sc, int *approx) {
    int64_t stride = max_support > 0 && total > (uint64_t)max_support
                         ? (int64_t)((total + (uint64_t)max_support - 1) / (uint64_t)max_support) : 0;
    *approx = 0;
    int ns = ix->n_shards;
    if (ns == 1) return walk_into(ix, &ix->shards[0], rs[0], d, stride, out, approx);
    if (!sc->per) {
        sc->per = calloc((size_t)ns, sizeof *sc->per);
        sc->per_rc = calloc((size_t)ns, sizeof *sc->per_rc);
        sc->per_approx = calloc((size_t)ns, sizeof *sc->per_approx);
        if (!sc->per || !sc->per_rc || !sc->per_approx) return IG_ERR_NOMEM; /* (freed with the scratch) */
    }
    walk_step w = {ix, rs, d, stride, sc};
    ig_each_shard(ix, walk_one, &w);
    sc->acc.n = 0;
    for (int i = 0; i < ns; i++) {
        if (sc->per_rc[i]) return sc->per_rc[i];
        *approx |= sc->per_approx[i];
        if (!sc->per[i].n) continue;
        int rc = merge_tc(&sc->acc, &sc->per[i], &sc->tmp);
        if (rc) return rc;
        tc_buf t = sc->acc;
        sc->acc = sc->tmp;
        sc->tmp = t;
    }
    if (!sc->acc.n) return 0; /* (buffers may still be NULL) */
    if (tc_reserve(out, out->n + sc->acc.n)) return IG_ERR_NOMEM;
    memcpy(out->tok + out->n, sc->acc.tok, (size_t)sc->acc.n * sizeof *out->tok);
    memcpy(out->cnt + out->n, sc->acc.cnt, (size_t)sc->acc.n * sizeof *out->cnt);
    out->n += sc->acc.n;
    return 0;
}

/* ---------------------------------------------------------------- the batch */

typedef struct {
    const ig_index *ix;
    ig_rows rows;
    int64_t max_support;
    ig_ntd_batch *b;
    ntd_scratch *sc;     /* per thread */
    int64_t max_entries; /* 0 = no cap */
    int64_t seen;        /* atomic: entries collected so far, over all threads */
} ntd_job;

static int ntd_work(void *ctx, int tid, int64_t begin, int64_t end) {
    ntd_job *j = ctx;
    const ig_index *ix = j->ix;
    ig_scratch rs;
    if (ig_scratch_init(&rs, ix->n_shards, NULL, 0)) return IG_ERR_NOMEM;
    int rc = 0;
    tc_buf *store = &j->b->store[tid];
    for (int64_t i = begin; i < end && !rc; i++) {
        if (j->max_entries && __atomic_load_n(&j->seen, __ATOMIC_RELAXED) > j->max_entries) {
            rc = IG_ERR_LIMIT; /* another thread went over the cap: stop early */
            break;
        }
        int64_t d = ig_row_ranges(ix, &j->rows, i, rs.a, rs.b);
        uint64_t total = 0;
        for (int s = 0; s < ix->n_shards; s++) total += (uint64_t)(rs.a[s].hi - rs.a[s].lo);
        ntd_row *row = &j->b->row[i];
        row->start = store->n;
        int approx = 0;
        rc = collect_ntd(ix, rs.a, d, total, j->max_support, store, &j->sc[tid], &approx);
        row->n = store->n - row->start;
        row->suffix_len = d;
        row->total = total;
        row->tid = tid;
        row->sparse = row->n == 1;
        row->approximate = (uint8_t)approx;
        if (!rc && j->max_entries && __atomic_add_fetch(&j->seen, row->n, __ATOMIC_RELAXED) > j->max_entries)
            rc = IG_ERR_LIMIT;
    }
    ig_scratch_free(&rs);
    return rc;
}

void ig_ntd_batch_free(ig_ntd_batch *b) {
    if (!b) return;
    for (int t = 0; t < b->n_threads; t++) tc_free(&b->store[t]);
    free(b->store);
    free(b->row);
    free(b);
}

static int run_job(ntd_job *j, int64_t n, int n_threads, ig_ntd_batch **out, char *err, size_t errlen) {
    /* A row takes ~10-100 us; starting a thread takes ~50 us idle and milliseconds on a busy
       machine (measured: 8 rows, 0.1 ms on one thread vs 10 ms on two under load). */
    int threads = ig_resolve_threads(n_threads, n, 32);
    ig_ntd_batch *b = calloc(1, sizeof *b);
    ntd_scratch *sc = calloc((size_t)threads, sizeof *sc);
    if (b) {
        b->rows = n;
        b->n_threads = threads;
        b->row = calloc((size_t)(n > 0 ? n : 1), sizeof *b->row);
        b->store = calloc((size_t)threads, sizeof *b->store);
    }
    if (!b || !sc || !b->row || !b->store) {
        free(sc);
        if (b && !b->store) b->n_threads = 0;
        ig_ntd_batch_free(b);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    j->b = b;
    j->sc = sc;
    int rc = ig_parallel_for(n, threads, 1, ntd_work, j);
    for (int t = 0; t < threads; t++) ntd_scratch_free(&sc[t], j->ix->n_shards);
    free(sc);
    if (rc) {
        ig_ntd_batch_free(b);
        if (rc == IG_ERR_LIMIT)
            return ig_fail(err, errlen, rc,
                           "the next-token distributions of this batch hold more than max_entries = %lld "
                           "entries (a row holds up to vocab_size + 1); split the batch or raise max_entries",
                           (long long)j->max_entries);
        return ig_fail(err, errlen, rc, "out of memory collecting next-token distributions");
    }
    for (int64_t i = 0; i < n; i++) b->entries += b->row[i].n;
    *out = b;
    return IG_OK;
}

/* The option checks both entry points share. */
static int check_limits(int64_t max_support, int64_t max_entries, char *err, size_t errlen) {
    if (max_support < 0) return ig_fail(err, errlen, IG_ERR_ARG, "max_support must be >= 0, got %lld", (long long)max_support);
    if (max_entries < 0) return ig_fail(err, errlen, IG_ERR_ARG, "max_entries must be >= 0, got %lld", (long long)max_entries);
    return IG_OK;
}

int ig_ntd_batch_run(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets, int64_t n,
                     int mode, int64_t max_support, int64_t max_entries, int n_threads, ig_ntd_batch **out,
                     char *err, size_t errlen) {
    if (!out) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output handle");
    *out = NULL;
    if (mode != IG_NTD_NGRAM && mode != IG_NTD_INFGRAM) return ig_fail(err, errlen, IG_ERR_ARG, "mode must be IG_NTD_NGRAM or IG_NTD_INFGRAM, not %d", mode);
    int rc = check_limits(max_support, max_entries, err, errlen);
    if (!rc) rc = ig_check_batch(ix, values, n_values, offsets, n, "prompts", err, errlen);
    if (rc) return rc;
    ntd_job j = {ix, {NULL, values, offsets, mode == IG_NTD_INFGRAM}, max_support, NULL, NULL, max_entries, 0};
    return run_job(&j, n, n_threads, out, err, errlen);
}

int ig_ntd_batch_tails(const ig_index *ix, const int64_t *rows, int64_t n_rows, int64_t width, const int64_t *which,
                       const int64_t *lengths, int64_t n, int mode, int64_t max_support, int64_t max_entries,
                       int n_threads, ig_ntd_batch **out, char *err, size_t errlen) {
    if (!out) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output handle");
    *out = NULL;
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (n < 0 || n_rows < 0 || width < 0) return ig_fail(err, errlen, IG_ERR_ARG, "negative count or width");
    if (n > 0 && (!which || !lengths || !rows)) return ig_fail(err, errlen, IG_ERR_ARG, "NULL rows, which or lengths");
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = which[i], m = lengths[i];
        if (r < 0 || r >= n_rows)
            return ig_fail(err, errlen, IG_ERR_ARG, "which[%lld] = %lld is not a row (0 .. %lld)", (long long)i,
                           (long long)r, (long long)n_rows - 1);
        if (m < 0 || m > width)
            return ig_fail(err, errlen, IG_ERR_ARG, "lengths[%lld] = %lld is not within the rows' width %lld",
                           (long long)i, (long long)m, (long long)width);
        const int64_t *tail = rows + r * width + (width - m);
        for (int64_t k = 0; k < m; k++)
            if (tail[k] < 0 || tail[k] >= (int64_t)ix->vocab_size)
                return ig_fail(err, errlen, IG_ERR_ARG, "rows[%lld]: id %lld at column %lld is outside the vocabulary "
                               "(size %lld)", (long long)r, (long long)tail[k], (long long)(width - m + k),
                               (long long)ix->vocab_size);
        total += m;
    }
    uint32_t *values = malloc((size_t)(total > 0 ? total : 1) * sizeof *values);
    int64_t *offsets = malloc((size_t)(n + 1) * sizeof *offsets);
    if (!values || !offsets) {
        free(values);
        free(offsets);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t *tail = rows + which[i] * width + (width - lengths[i]);
        for (int64_t k = 0; k < lengths[i]; k++) values[offsets[i] + k] = (uint32_t)tail[k];
        offsets[i + 1] = offsets[i] + lengths[i];
    }
    int rc = ig_ntd_batch_run(ix, values, total, offsets, n, mode, max_support, max_entries, n_threads, out, err,
                              errlen);
    free(values);
    free(offsets);
    return rc;
}

int ig_ntd_batch_states(const ig_index *ix, const int64_t *states, int64_t n_state_values, int64_t n,
                        int64_t max_support, int64_t max_entries, int n_threads, ig_ntd_batch **out, char *err,
                        size_t errlen) {
    if (!out) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output handle");
    *out = NULL;
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (n < 0 || (n > 0 && !states)) return ig_fail(err, errlen, IG_ERR_ARG, "states: NULL or negative count");
    int rc = check_limits(max_support, max_entries, err, errlen);
    if (!rc) rc = ig_check_states(ix, states, n_state_values, n, NULL, NULL, err, errlen);
    if (rc) return rc;
    ntd_job j = {ix, {states, NULL, NULL, 1}, max_support, NULL, NULL, max_entries, 0};
    return run_job(&j, n, n_threads, out, err, errlen);
}

int64_t ig_ntd_batch_rows(const ig_ntd_batch *b) { return b ? b->rows : 0; }
int64_t ig_ntd_batch_entries(const ig_ntd_batch *b) { return b ? b->entries : 0; }

int ig_ntd_batch_copy(const ig_ntd_batch *b, int64_t *row_offsets, uint32_t *tokens, uint64_t *counts, int64_t cap,
                      int64_t *suffix_len, uint64_t *total, uint8_t *sparse, uint8_t *approximate, char *err,
                      size_t errlen) {
    if (!b) return ig_fail(err, errlen, IG_ERR_ARG, "NULL batch");
    int64_t acc = 0;
    for (int64_t i = 0; i < b->rows; i++) {
        const ntd_row *r = &b->row[i];
        if (row_offsets) row_offsets[i] = acc;
        if (suffix_len) suffix_len[i] = r->suffix_len;
        if (total) total[i] = r->total;
        if (sparse) sparse[i] = r->sparse;
        if (approximate) approximate[i] = r->approximate;
        acc += r->n;
    }
    if (row_offsets) row_offsets[b->rows] = acc;
    if (b->entries > cap)
        return ig_fail(err, errlen, IG_ERR_CAPACITY, "need room for %lld entries, got %lld", (long long)b->entries,
                       (long long)cap);
    if (b->entries && (!tokens || !counts)) return ig_fail(err, errlen, IG_ERR_ARG, "NULL tokens or counts");
    acc = 0;
    for (int64_t i = 0; i < b->rows; i++) {
        const ntd_row *r = &b->row[i];
        const tc_buf *s = &b->store[r->tid];
        if (!r->n) continue; /* (an empty row's store may be NULL) */
        memcpy(tokens + acc, s->tok + r->start, (size_t)r->n * sizeof *tokens);
        memcpy(counts + acc, s->cnt + r->start, (size_t)r->n * sizeof *counts);
        acc += r->n;
    }
    return IG_OK;
}

/* The index of tok in the increasing ids t[0..n), or -1. */
static int64_t find_token(const uint32_t *t, int64_t n, uint32_t tok) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (t[mid] < tok) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && t[lo] == tok ? lo : -1;
}

int ig_ntd_batch_probs(const ig_ntd_batch *b, int64_t separator, int64_t eos, int64_t *rows, int64_t *tokens,
                       double *probs, int64_t cap, int64_t *n_out, double *totals, char *err, size_t errlen) {
    if (!b) return ig_fail(err, errlen, IG_ERR_ARG, "NULL batch");
    if (!n_out) return ig_fail(err, errlen, IG_ERR_ARG, "NULL n_out");
    *n_out = 0;
    if (separator < 0 || separator > UINT32_MAX)
        return ig_fail(err, errlen, IG_ERR_ARG, "separator %lld is not a token id", (long long)separator);
    if (eos > UINT32_MAX) return ig_fail(err, errlen, IG_ERR_ARG, "eos %lld is not a token id", (long long)eos);
    if (b->entries > cap)
        return ig_fail(err, errlen, IG_ERR_CAPACITY, "need room for %lld entries, got %lld", (long long)b->entries,
                       (long long)cap);
    if (b->entries && (!rows || !tokens || !probs)) return ig_fail(err, errlen, IG_ERR_ARG, "NULL rows, tokens or probs");
    int64_t k = 0;
    for (int64_t i = 0; i < b->rows; i++) {
        const ntd_row *r = &b->row[i];
        const uint32_t *t = r->n ? b->store[r->tid].tok + r->start : NULL; /* (an empty row's store may be NULL) */
        const uint64_t *c = r->n ? b->store[r->tid].cnt + r->start : NULL;
        int64_t sep = r->n ? find_token(t, r->n, (uint32_t)separator) : -1;
        uint64_t total = r->total, sep_count = sep >= 0 ? c[sep] : 0;
        int64_t into = -1; /* the entry end-of-document's count joins: eos's own, when it is a real token */
        if (sep >= 0 && eos >= 0) into = find_token(t, r->n, (uint32_t)eos);
        if (sep >= 0 && eos < 0) total -= sep_count; /* nowhere to put it: renormalize over the rest */
        if (totals) totals[i] = (double)total;
        if (!total) continue;
        const double scale = 1.0 / (double)total;
        for (int64_t e = 0; e < r->n; e++) {
            uint64_t count = c[e];
            int64_t token = t[e];
            if (e == sep) {
                if (eos < 0 || into >= 0) continue; /* dropped, or merged into eos's entry */
                token = eos;
            } else if (e == into) {
                count += sep_count;
            }
            rows[k] = i;
            tokens[k] = token;
            probs[k++] = (double)count * scale;
        }
    }
    *n_out = k;
    return IG_OK;
}
