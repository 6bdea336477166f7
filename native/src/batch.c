/* batch.c - batched queries (loop in C, spread over threads) and single-call fast paths.
 *
 * Every batch call checks all of its input first (offsets, ids), then hands the queries out to
 * worker threads (parallel.c). Workers only read the index and write their own output slots,
 * so the results do not depend on the number of threads or on the order of work.
 */
#include <stdio.h>
#include <stdlib.h>

#include "batch_internal.h"
#include "find_many.h"
#include "parallel.h"
#include "state_internal.h"

/* ---------------------------------------------------------------- checks */

/* Offsets inside [0, n_values] and non-decreasing, and every id of the batch a valid token. */
int ig_check_batch(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                int64_t n, const char *what, char *err, size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (n < 0) return ig_fail(err, errlen, IG_ERR_ARG, "%s: negative number of queries %lld", what, (long long)n);
    if (n == 0) return IG_OK;
    if (!offsets) return ig_fail(err, errlen, IG_ERR_ARG, "%s: NULL offsets", what);
    if (n_values < 0 || (n_values > 0 && !values)) return ig_fail(err, errlen, IG_ERR_ARG, "%s: NULL or negative-length values", what);
    if (offsets[0] < 0 || offsets[0] > n_values)
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: offsets[0] = %lld is outside the %lld values", what,
                       (long long)offsets[0], (long long)n_values);
    for (int64_t i = 0; i < n; i++)
        if (offsets[i + 1] < offsets[i] || offsets[i + 1] > n_values)
            return ig_fail(err, errlen, IG_ERR_ARG, "%s: offsets[%lld] = %lld is not within [offsets[%lld] = %lld, %lld]",
                           what, (long long)(i + 1), (long long)offsets[i + 1], (long long)i, (long long)offsets[i],
                           (long long)n_values);
    uint32_t v = ix->vocab_size;
    for (int64_t j = offsets[0]; j < offsets[n]; j++) {
        if (values[j] < v) continue;
        int64_t row = 0; /* name the query holding it: the last row starting at or before j */
        for (int64_t a = 0, b = n; a < b;) {
            int64_t mid = a + (b - a) / 2;
            if (offsets[mid] <= j && (offsets[mid + 1] > j)) { row = mid; break; }
            if (offsets[mid + 1] <= j) a = mid + 1; else b = mid;
        }
        char name[96];
        snprintf(name, sizeof name, "%s[%lld]", what, (long long)row);
        return ig_check_ids(ix, values + offsets[row], offsets[row + 1] - offsets[row], name, err, errlen);
    }
    return IG_OK;
}

/* ---------------------------------------------------------------- counting */

int64_t ig_count_fast(const ig_index *ix, const uint32_t *q, int64_t len) {
    if (!ix || len < 0 || (len > 0 && !q)) return IG_ERR_ARG;
    for (int64_t i = 0; i < len; i++)
        if (q[i] >= ix->vocab_size) return IG_ERR_ARG;
    if (ix->n_shards == 1) {
        ig_range r = ig_find_in_shard(&ix->shards[0], ix->token_width, q, len);
        return r.hi - r.lo;
    }
    ig_scratch sc;
    if (ig_scratch_init(&sc, ix->n_shards, NULL, 0)) return IG_ERR_NOMEM;
    uint64_t c = ig_find_all(ix, q, len, sc.a); /* (the shards at once when cold) */
    ig_scratch_free(&sc);
    return (int64_t)c;
}

typedef struct {
    const ig_index *ix;
    const uint32_t *values;
    const int64_t *offsets;
    uint64_t *counts;
} count_job;

/* Queries per block of count_work: searched together, interleaved (find_many.h). */
#define IG_COUNT_BLOCK 256

static int count_work(void *ctx, int tid, int64_t begin, int64_t end) {
    count_job *j = ctx;
    (void)tid;
    ig_query qs[IG_COUNT_BLOCK];
    ig_range rs[IG_COUNT_BLOCK];
    for (int64_t b = begin; b < end; b += IG_COUNT_BLOCK) {
        int64_t n = end - b < IG_COUNT_BLOCK ? end - b : IG_COUNT_BLOCK;
        for (int64_t i = 0; i < n; i++) {
            qs[i].q = j->values + j->offsets[b + i];
            qs[i].len = j->offsets[b + i + 1] - j->offsets[b + i];
            j->counts[b + i] = 0;
        }
        for (int s = 0; s < j->ix->n_shards; s++) {
            ig_find_many(&j->ix->shards[s], j->ix->token_width, qs, n, rs, 1);
            for (int64_t i = 0; i < n; i++) j->counts[b + i] += (uint64_t)(rs[i].hi - rs[i].lo);
        }
    }
    return 0;
}

int ig_count_batch(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                   int64_t n, uint64_t *counts, int n_threads, char *err, size_t errlen) {
    int rc = ig_check_batch(ix, values, n_values, offsets, n, "queries", err, errlen);
    if (rc || n == 0) return rc;
    if (!counts) return ig_fail(err, errlen, IG_ERR_ARG, "counts: NULL output");
    count_job j = {ix, values, offsets, counts};
    return ig_parallel_for(n, ig_resolve_threads(n_threads, n, 512), IG_COUNT_BLOCK, count_work, &j);
}

/* ---------------------------------------------------------------- probabilities */

int64_t ig_row_ranges(const ig_index *ix, const ig_rows *rows, int64_t i, ig_range *rs, ig_range *tmp) {
    if (rows->states) return ig_state_load(ix, rows->states + i * ig_state_size(ix), rs, "states", NULL, 0);
    const uint32_t *q = rows->values + rows->offsets[i];
    int64_t len = rows->offsets[i + 1] - rows->offsets[i];
    if (rows->infinite) return ig_longest_suffix(ix, q, len, len, rs, tmp);
    ig_find_all(ix, q, len, rs);
    return len;
}

typedef struct {
    const ig_index *ix;
    const ig_rows *rows;
    const uint32_t *tokens;
    uint64_t *count, *prompt_count;
    int64_t *suffix_len;
    uint8_t *sparse;
} prob_job;

static int prob_work(void *ctx, int tid, int64_t begin, int64_t end) {
    prob_job *j = ctx;
    (void)tid;
    ig_scratch sc;
    if (ig_scratch_init(&sc, j->ix->n_shards, NULL, 0)) return IG_ERR_NOMEM;
    for (int64_t i = begin; i < end; i++) {
        int64_t d = ig_row_ranges(j->ix, j->rows, i, sc.a, sc.b);
        ig_prob p;
        ig_prob_from_ranges(j->ix, sc.a, d, j->tokens[i], sc.c, &p);
        j->count[i] = p.count;
        j->prompt_count[i] = p.prompt_count;
        j->suffix_len[i] = p.suffix_len;
        if (j->sparse) j->sparse[i] = (uint8_t)p.sparse;
    }
    ig_scratch_free(&sc);
    return 0;
}

int ig_prob_rows(const ig_index *ix, const ig_rows *rows, int64_t n, const uint32_t *tokens, uint64_t *count,
                 uint64_t *prompt_count, int64_t *suffix_len, uint8_t *sparse, int n_threads, char *err,
                 size_t errlen) {
    prob_job j = {ix, rows, tokens, count, prompt_count, suffix_len, sparse};
    int rc = ig_parallel_for(n, ig_resolve_threads(n_threads, n, 64), 8, prob_work, &j);
    return rc ? ig_fail(err, errlen, rc, "out of memory") : IG_OK;
}

int ig_prob_batch(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                  int64_t n, const uint32_t *tokens, int infinite, uint64_t *count, uint64_t *prompt_count,
                  int64_t *suffix_len, uint8_t *sparse, int n_threads, char *err, size_t errlen) {
    int rc = ig_check_batch(ix, values, n_values, offsets, n, "prompts", err, errlen);
    if (rc || n == 0) return rc;
    if (!tokens || !count || !prompt_count || !suffix_len) return ig_fail(err, errlen, IG_ERR_ARG, "NULL tokens or output");
    if ((rc = ig_check_ids(ix, tokens, n, "tokens", err, errlen))) return rc;
    ig_rows rows = {NULL, values, offsets, infinite != 0};
    return ig_prob_rows(ix, &rows, n, tokens, count, prompt_count, suffix_len, sparse, n_threads, err, errlen);
}

/* ---------------------------------------------------------------- dense scoring */

/* Long sequences are cut into pieces of this many tokens when several threads share them. */
#define IG_SCORE_PIECE 8192

typedef struct {
    const ig_index *ix;
    const uint32_t *values;
    const int64_t *offsets;
    const int64_t *piece_row, *piece_begin; /* per piece: its row and first token (absolute) */
    int64_t n_pieces;
    uint64_t *num, *den;
    int64_t *suffix_len;
    uint8_t *sparse;
    const int *cancel;
} score_job;

static int score_work(void *ctx, int tid, int64_t begin, int64_t end) {
    score_job *j = ctx;
    (void)tid;
    ig_scratch sc;
    if (ig_scratch_init(&sc, j->ix->n_shards, NULL, 0)) return IG_ERR_NOMEM;
    int rc = 0;
    for (int64_t p = begin; p < end && !rc; p++) {
        if (ig_cancelled(j->cancel)) { rc = IG_ERR_CANCELLED; break; } /* (many short rows) */
        int64_t row = j->piece_row[p], start = j->offsets[row];
        int64_t stop = p + 1 < j->n_pieces && j->piece_row[p + 1] == row ? j->piece_begin[p + 1] : j->offsets[row + 1];
        rc = ig_score_span(j->ix, j->values + start, j->piece_begin[p] - start, stop - start, j->num + start,
                        j->den + start, j->suffix_len + start, j->sparse ? j->sparse + start : NULL, &sc, j->cancel);
    }
    ig_scratch_free(&sc);
    return rc;
}

int ig_score_batch(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                   int64_t n, uint64_t *num, uint64_t *den, int64_t *suffix_len, uint8_t *sparse,
                   int n_threads, const int *cancel, char *err, size_t errlen) {
    int rc = ig_check_batch(ix, values, n_values, offsets, n, "sequences", err, errlen);
    if (rc || n == 0) return rc;
    if (!num || !den || !suffix_len) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    int64_t tokens = offsets[n] - offsets[0];
    int threads = ig_resolve_threads(n_threads, tokens / 1024 + 1, 4);
    /* One piece per row, or per IG_SCORE_PIECE tokens of a row when threads share the work. */
    int64_t n_pieces = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = offsets[i + 1] - offsets[i];
        n_pieces += threads > 1 && len > IG_SCORE_PIECE ? (len + IG_SCORE_PIECE - 1) / IG_SCORE_PIECE : 1;
    }
    int64_t *piece_row = malloc((size_t)n_pieces * sizeof(int64_t));
    int64_t *piece_begin = malloc((size_t)n_pieces * sizeof(int64_t));
    if (!piece_row || !piece_begin) {
        free(piece_row);
        free(piece_begin);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = offsets[i + 1] - offsets[i];
        int64_t step = threads > 1 && len > IG_SCORE_PIECE ? IG_SCORE_PIECE : (len > 0 ? len : 1);
        for (int64_t b = 0; b < len || (b == 0 && len == 0); b += step) {
            piece_row[k] = i;
            piece_begin[k++] = offsets[i] + b;
            if (len == 0) break;
        }
    }
    score_job j = {ix, values, offsets, piece_row, piece_begin, k, num, den, suffix_len, sparse, cancel};
    rc = ig_parallel_for(k, ig_resolve_threads(threads, k, 1), 1, score_work, &j);
    free(piece_row);
    free(piece_begin);
    if (rc == IG_ERR_CANCELLED) return ig_fail(err, errlen, rc, "cancelled");
    return rc ? ig_fail(err, errlen, rc, "out of memory") : IG_OK;
}
