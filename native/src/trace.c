/* trace.c - tracing texts back to the corpus (infinigram_trace.h): longest matches at every
   position from one pass of ∞-gram states, and the verbatim spans a text shares with the corpus.

   The pass: E[j] = length of the longest suffix of x[0..j) that occurs (the decoding state after
   j tokens, one narrowing or one back-off per token, as dense scoring). x[l..j) occurs iff
   E[j] >= j - l, and s(j) = j - E[j] never decreases (E[j+1] <= E[j] + 1), so the longest match
   starting at l ends at the last j with s(j) <= l: one pointer walking forward gives every start's
   match in linear time, with no search per start (the official engine searches every start). */
#include <stdio.h>
#include <stdlib.h>

#include "batch_internal.h"
#include "parallel.h"
#include "state_internal.h"

/* match[l] for l in [0, m): the longest corpus match starting at l (E: scratch of m + 1).
   IG_ERR_CANCELLED (match not written) once *cancel is set. */
static int longest_matches(const ig_index *ix, const uint32_t *x, int64_t m, int64_t *E, int64_t *match,
                           ig_scratch *sc, ig_lce_memo **memo, const int *cancel) {
    ig_range *cur = sc->a, *next = sc->b, *tmp = sc->c;
    int64_t l = ig_longest_suffix(ix, x, 0, 0, cur, tmp);
    E[0] = 0;
    for (int64_t i = 0; i < m; i++) {
        if (i % IG_CANCEL_EVERY == IG_CANCEL_EVERY - 1 && ig_cancelled(cancel)) return IG_ERR_CANCELLED;
        l = ig_state_step(ix, x, i + 1, l, &cur, &next, tmp, memo);
        E[i + 1] = l;
    }
    int64_t j = 0;
    for (int64_t s = 0; s < m; s++) {
        if (j < s) j = s;
        while (j < m && (j + 1) - E[j + 1] <= s) j++;
        match[s] = j - s;
    }
    return IG_OK;
}

typedef struct {
    const ig_index *ix;
    const uint32_t *values;
    const int64_t *offsets;
    int64_t *match_len;                /* creativity: aligned with values */
    const ig_attribute_opts *opts;     /* attribution: */
    int64_t *n_spans, *span_l, *span_r, *lo, *hi;
    uint64_t *span_count;
    const int *cancel;                 /* NULL, or stop once *cancel is set */
} trace_job;

/* The spans of one text x[0..m) (match: its longest matches; nd, pb: scratch of m + 1) into
   slots base.. of the job's span arrays; returns how many, or IG_ERR_CANCELLED (< 0). */
static int64_t attribute_text(const trace_job *j, const uint32_t *x, int64_t m, const int64_t *match, int64_t *nd,
                              int64_t *pb, int64_t base, ig_range *ranges) {
    const ig_attribute_opts *o = j->opts;
    const uint8_t *delim = o->delimiter, *ws = o->word_start;
    int S = j->ix->n_shards;
    if (delim) { /* nd[l] = first delimiter position >= l (m: none) */
        nd[m] = m;
        for (int64_t i = m - 1; i >= 0; i--) nd[i] = delim[x[i]] ? i : nd[i + 1];
    }
    if (ws) { /* pb[r] = last word boundary <= r (a word start, or the end of the text); -1: none */
        int64_t b = -1;
        for (int64_t i = 0; i < m; i++) pb[i] = b = ws[x[i]] ? i : b;
        pb[m] = m;
    }
    int64_t out = 0, last_r = 0, fail_r = -1;
    for (int64_t l = 0; l < m; l++) {
        if (l % IG_CANCEL_EVERY == IG_CANCEL_EVERY - 1 && ig_cancelled(j->cancel)) return IG_ERR_CANCELLED;
        if (ws && !ws[x[l]]) continue;
        int64_t r = l + match[l];
        if (delim && nd[l] < r - 1) r = nd[l] + 1;
        if (ws && r > l) {
            int64_t b = pb[r];
            r = b > l ? b : l;
        }
        if (r - l < o->min_len || r <= last_r) continue;
        /* a span ending at fail_r, starting earlier, was too frequent: this one lies inside it */
        if (r == fail_r) continue;
        uint64_t c = ig_find_all(j->ix, x + l, r - l, ranges);
        if (c > o->max_count) {
            fail_r = r;
            continue;
        }
        int64_t slot = base + out++;
        j->span_l[slot] = l;
        j->span_r[slot] = r;
        j->span_count[slot] = c;
        if (j->lo)
            for (int s = 0; s < S; s++) {
                j->lo[slot * S + s] = ranges[s].lo;
                j->hi[slot * S + s] = ranges[s].hi;
            }
        last_r = r;
    }
    return out;
}

static int trace_work(void *ctx, int tid, int64_t begin, int64_t end) {
    const trace_job *j = ctx;
    (void)tid;
    int64_t longest = 0;
    for (int64_t i = begin; i < end; i++)
        if (j->offsets[i + 1] - j->offsets[i] > longest) longest = j->offsets[i + 1] - j->offsets[i];
    ig_scratch sc;
    if (ig_scratch_init(&sc, j->ix->n_shards, NULL, 0)) return IG_ERR_NOMEM;
    size_t cells = (size_t)longest + 1;
    int64_t *E = malloc(4 * cells * sizeof *E);
    ig_range *ranges = malloc((size_t)j->ix->n_shards * sizeof *ranges);
    if (!E || !ranges) {
        free(E);
        free(ranges);
        ig_scratch_free(&sc);
        return IG_ERR_NOMEM;
    }
    int64_t *match = E + cells, *nd = match + cells, *pb = nd + cells;
    ig_lce_memo *memo = NULL;
    int rc = IG_OK;
    for (int64_t i = begin; i < end && !rc; i++) {
        if (ig_cancelled(j->cancel)) { rc = IG_ERR_CANCELLED; break; } /* (many short texts) */
        const uint32_t *x = j->values + j->offsets[i];
        int64_t m = j->offsets[i + 1] - j->offsets[i];
        int64_t *ml = j->match_len ? j->match_len + j->offsets[i] : match;
        rc = longest_matches(j->ix, x, m, E, ml, &sc, &memo, j->cancel);
        if (!rc && j->opts) {
            int64_t k = attribute_text(j, x, m, ml, nd, pb, j->offsets[i] - j->offsets[0], ranges);
            if (k < 0) rc = (int)k;
            else j->n_spans[i] = k;
        }
    }
    ig_lce_memo_free(memo);
    free(E);
    free(ranges);
    ig_scratch_free(&sc);
    return rc;
}

static int run(const trace_job *j, int64_t n, int n_threads, char *err, size_t errlen) {
    int rc = ig_parallel_for(n, ig_resolve_threads(n_threads, n, 1), 1, trace_work, (void *)j);
    if (rc == IG_ERR_CANCELLED) return ig_fail(err, errlen, rc, "cancelled");
    return rc ? ig_fail(err, errlen, rc, "out of memory") : IG_OK;
}

int ig_creativity_batch(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                        int64_t n, int64_t *match_len, int n_threads, const int *cancel, char *err,
                        size_t errlen) {
    int rc = ig_check_batch(ix, values, n_values, offsets, n, "texts", err, errlen);
    if (rc || n == 0) return rc;
    if (!match_len) return ig_fail(err, errlen, IG_ERR_ARG, "match_len: NULL output");
    trace_job j = {ix, values, offsets, match_len, NULL, NULL, NULL, NULL, NULL, NULL, NULL, cancel};
    return run(&j, n, n_threads, err, errlen);
}

int ig_attribute_batch(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                       int64_t n, const ig_attribute_opts *opts, int64_t *n_spans, int64_t *span_l, int64_t *span_r,
                       uint64_t *span_count, int64_t *lo, int64_t *hi, int n_threads, const int *cancel, char *err,
                       size_t errlen) {
    int rc = ig_check_batch(ix, values, n_values, offsets, n, "texts", err, errlen);
    if (rc || n == 0) return rc;
    if (!opts) return ig_fail(err, errlen, IG_ERR_ARG, "opts: NULL");
    if (opts->min_len < 1) return ig_fail(err, errlen, IG_ERR_ARG, "min_len must be >= 1, got %lld", (long long)opts->min_len);
    if (opts->max_count < 1) return ig_fail(err, errlen, IG_ERR_ARG, "max_count must be >= 1, got 0");
    if (!n_spans || !span_l || !span_r || !span_count) return ig_fail(err, errlen, IG_ERR_ARG, "NULL span output");
    if (!lo != !hi) return ig_fail(err, errlen, IG_ERR_ARG, "lo and hi: give both or neither");
    trace_job j = {ix, values, offsets, NULL, opts, n_spans, span_l, span_r, lo, hi, span_count, cancel};
    return run(&j, n, n_threads, err, errlen);
}

int ig_locate_ranges(const ig_index *ix, const int64_t *lo, const int64_t *hi, int64_t n_ranges, int64_t max_per,
                     int32_t *shard, int64_t *doc, int64_t *offset, int64_t *n_out, const int *cancel, char *err,
                     size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (n_ranges < 0 || max_per < 0) return ig_fail(err, errlen, IG_ERR_ARG, "negative n_ranges or max_per");
    if (n_ranges == 0) return IG_OK;
    if (!lo || !hi || !n_out || (max_per > 0 && (!shard || !doc || !offset)))
        return ig_fail(err, errlen, IG_ERR_ARG, "NULL ranges or output");
    int S = ix->n_shards;
    for (int64_t k = 0; k < n_ranges * S; k++) {
        const ig_shard *s = &ix->shards[k % S];
        if (lo[k] < 0 || hi[k] < lo[k] || hi[k] > s->num_tokens)
            return ig_fail(err, errlen, IG_ERR_ARG, "range %lld: [%lld, %lld) is not a range of shard %d",
                           (long long)(k / S), (long long)lo[k], (long long)hi[k], (int)(k % S));
    }
    int64_t done = 0;
    for (int64_t k = 0; k < n_ranges; k++) {
        int64_t w = 0;
        if (ig_cancelled(cancel)) return ig_fail(err, errlen, IG_ERR_CANCELLED, "cancelled");
        for (int s = 0; s < S && w < max_per; s++)
            for (int64_t rank = lo[k * S + s]; rank < hi[k * S + s] && w < max_per; rank++) {
                if (++done % IG_CANCEL_EVERY == 0 && ig_cancelled(cancel))
                    return ig_fail(err, errlen, IG_ERR_CANCELLED, "cancelled");
                int64_t slot = k * max_per + w, d, off;
                int rc = ig_locate(ix, s, ig_sa(&ix->shards[s], rank), &d, &off, err, errlen);
                if (rc) return rc;
                shard[slot] = s;
                doc[slot] = d;
                offset[slot] = off;
                w++;
            }
        n_out[k] = w;
    }
    return IG_OK;
}
