/* state.c - decoding states: the longest occurring suffix of a context as plain int64 data,
   extended one token at a time (see infinigram_state.h). */
#include <stdio.h>
#include <stdlib.h>

#include "batch_internal.h"
#include "parallel.h"
#include "state_internal.h"
#include "find_many.h"

int64_t ig_state_size(const ig_index *ix) { return ix ? 2 + 2 * (int64_t)ix->n_shards : 0; }

int ig_check_state_len(int64_t got, int64_t want, const char *what, const char *of, char *err, size_t errlen) {
    if (got == want) return IG_OK;
    return ig_fail(err, errlen, IG_ERR_ARG, "%s: %lld int64 values given; the call needs %lld (states of this %s)",
                   what, (long long)got, (long long)want, of);
}

int64_t ig_state_load(const ig_index *ix, const int64_t *state, ig_range *rs, const char *what, char *err,
                   size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (!state) return ig_fail(err, errlen, IG_ERR_ARG, "%s: NULL state", what);
    uint64_t c = 0;
    for (int i = 0; i < ix->n_shards; i++) {
        int64_t lo = state[2 + 2 * i], hi = state[3 + 2 * i];
        if (lo < 0 || hi < lo || hi > ix->shards[i].num_tokens)
            return ig_fail(err, errlen, IG_ERR_ARG, "%s: range [%lld, %lld) of shard %d is not a state of this index",
                           what, (long long)lo, (long long)hi, i);
        rs[i] = (ig_range){lo, hi};
        c += (uint64_t)(hi - lo);
    }
    /* a matched suffix lies inside one document: no longer than a shard (and no overflow later) */
    if (state[0] < 0 || state[0] > IG_MAX_SHARD_TOKENS || (int64_t)c != state[1] || (c == 0 && state[0] > 0))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: suffix_len %lld / count %lld are not a state of this index", what,
                       (long long)state[0], (long long)state[1]);
    return state[0];
}

void ig_state_store(const ig_index *ix, int64_t suffix_len, const ig_range *rs, int64_t *state) {
    uint64_t c = 0;
    for (int i = 0; i < ix->n_shards; i++) {
        state[2 + 2 * i] = rs[i].lo;
        state[3 + 2 * i] = rs[i].hi;
        c += (uint64_t)(rs[i].hi - rs[i].lo);
    }
    state[0] = suffix_len;
    state[1] = (int64_t)c;
}

int64_t ig_state_begin(const ig_index *ix, const int64_t *state, int64_t state_len, ig_scratch *sc, char *err,
                       size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    int rc = ig_check_state_len(state_len, ig_state_size(ix), "state", "index", err, errlen);
    if (!rc) rc = ig_scratch_init(sc, ix->n_shards, err, errlen);
    if (rc) return rc;
    int64_t l = ig_state_load(ix, state, sc->a, "state", err, errlen);
    if (l < 0) ig_scratch_free(sc);
    return l;
}

int ig_state_init(const ig_index *ix, const uint32_t *ctx, int64_t len, int64_t *state, int64_t state_len, char *err,
                  size_t errlen) {
    int rc = ig_check_ids(ix, ctx, len, "context", err, errlen);
    if (!rc) rc = ig_check_state_len(state_len, ig_state_size(ix), "state", "index", err, errlen);
    if (rc) return rc;
    if (!state) return ig_fail(err, errlen, IG_ERR_ARG, "state: NULL output");
    ig_scratch sc;
    if ((rc = ig_scratch_init(&sc, ix->n_shards, err, errlen))) return rc;
    int64_t l = ig_longest_suffix(ix, ctx, len, len, sc.a, sc.b);
    ig_state_store(ix, l, sc.a, state);
    ig_scratch_free(&sc);
    return IG_OK;
}

int64_t ig_state_step(const ig_index *ix, const uint32_t *ctx, int64_t len, int64_t l, ig_range **cur,
                      ig_range **next, ig_range *tmp, ig_lce_memo **memo) {
    if (ig_extend_ranges(ix, *cur, l, ctx[len - 1], *next) > 0) { /* the match grows: its ranges are next */
        ig_range *t = *cur;
        *cur = *next;
        *next = t;
        return l + 1;
    }
    return ig_backoff(ix, ctx, len, l, *cur, tmp, memo);
}

/* The state of ctx[0..len) into out from the ranges sc->a (suffix length l) of ctx[0..len-1). */
static void extend(const ig_index *ix, ig_scratch *sc, int64_t l, const uint32_t *ctx, int64_t len, int64_t *out,
                   ig_lce_memo **memo) {
    ig_range *cur = sc->a, *next = sc->b;
    l = ig_state_step(ix, ctx, len, l, &cur, &next, sc->c, memo);
    ig_state_store(ix, l, cur, out);
}

static int check_extend(const ig_index *ix, int64_t l, const uint32_t *ctx, int64_t len, const char *what, char *err,
                        size_t errlen) {
    if (len < 1 || len < l + 1)
        return ig_fail(err, errlen, IG_ERR_ARG,
                       "%s: the context given has %lld tokens; extending a state of suffix_len %lld needs at least %lld "
                       "(its matched suffix and the new token)", what, (long long)len, (long long)l, (long long)(l + 1));
    return ig_check_ids(ix, ctx + len - (l + 1), l + 1, what, err, errlen);
}

int ig_state_extend(const ig_index *ix, const int64_t *state, int64_t state_len, const uint32_t *ctx, int64_t len,
                    int64_t *out, char *err, size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (!out || (len > 0 && !ctx)) return ig_fail(err, errlen, IG_ERR_ARG, "NULL context or output");
    ig_scratch sc;
    int64_t l = ig_state_begin(ix, state, state_len, &sc, err, errlen);
    if (l < 0) return (int)l;
    int rc = check_extend(ix, l, ctx, len, "context", err, errlen);
    ig_lce_memo *memo = NULL;
    if (!rc) extend(ix, &sc, l, ctx, len, out, &memo);
    ig_lce_memo_free(memo);
    ig_scratch_free(&sc);
    return rc;
}

int ig_state_prob(const ig_index *ix, const int64_t *state, int64_t state_len, uint32_t token, ig_prob *out,
                  char *err, size_t errlen) {
    if (!out) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    ig_scratch sc;
    int64_t l = ig_state_begin(ix, state, state_len, &sc, err, errlen);
    if (l < 0) return (int)l;
    int rc = ig_check_ids(ix, &token, 1, "token", err, errlen);
    if (!rc) ig_prob_from_ranges(ix, sc.a, l, token, sc.b, out);
    ig_scratch_free(&sc);
    return rc;
}

/* ---------------------------------------------------------------- batches of states */

typedef struct {
    const ig_index *ix;
    const int64_t *states;
    const uint32_t *values;
    const int64_t *offsets;
    int64_t *out;
} extend_job;

/* Rows per block of extend_work: their narrowings run interleaved (find_many.h); the rows whose
   match does not grow back off one by one afterwards. */
#define IG_EXTEND_BLOCK 64

static int extend_work(void *ctx, int tid, int64_t begin, int64_t end) {
    extend_job *j = ctx;
    (void)tid;
    const ig_index *ix = j->ix;
    int ns = ix->n_shards;
    int64_t size = ig_state_size(ix);
    ig_scratch sc;
    if (ig_scratch_init(&sc, ns, NULL, 0)) return IG_ERR_NOMEM;
    ig_range *cur = malloc(2 * (size_t)IG_EXTEND_BLOCK * (size_t)ns * sizeof *cur);
    if (!cur) {
        ig_scratch_free(&sc);
        return IG_ERR_NOMEM;
    }
    ig_range *next = cur + (size_t)IG_EXTEND_BLOCK * (size_t)ns;
    int64_t ls[IG_EXTEND_BLOCK];
    uint32_t ts[IG_EXTEND_BLOCK];
    uint64_t cnt[IG_EXTEND_BLOCK];
    ig_lce_memo *memo = NULL;
    for (int64_t b = begin; b < end; b += IG_EXTEND_BLOCK) {
        int64_t m = end - b < IG_EXTEND_BLOCK ? end - b : IG_EXTEND_BLOCK;
        for (int64_t k = 0; k < m; k++) {
            int64_t i = b + k;
            ls[k] = ig_state_load(ix, j->states + i * size, cur + k * ns, "states", NULL, 0);
            ts[k] = j->values[j->offsets[i + 1] - 1]; /* (checked: every context holds a token) */
        }
        ig_extend_many(ix, cur, ls, ts, m, next, cnt);
        for (int64_t k = 0; k < m; k++) { /* as ig_state_step: grown, else a back-off */
            int64_t i = b + k;
            if (cnt[k] > 0) {
                ig_state_store(ix, ls[k] + 1, next + k * ns, j->out + i * size);
                continue;
            }
            const uint32_t *c = j->values + j->offsets[i];
            int64_t l = ig_backoff(ix, c, j->offsets[i + 1] - j->offsets[i], ls[k], cur + k * ns, sc.c, &memo);
            ig_state_store(ix, l, cur + k * ns, j->out + i * size);
        }
    }
    ig_lce_memo_free(memo);
    free(cur);
    ig_scratch_free(&sc);
    return 0;
}

int ig_check_states(const ig_index *ix, const int64_t *states, int64_t n_state_values, int64_t n,
                    const uint32_t *values, const int64_t *offsets, char *err, size_t errlen) {
    if (n > 0 && !states) return ig_fail(err, errlen, IG_ERR_ARG, "states: NULL");
    int64_t size = ig_state_size(ix);
    if (n < 0 || n > INT64_MAX / size) return ig_fail(err, errlen, IG_ERR_ARG, "bad number of states %lld",
                                                      (long long)n);
    int rc = ig_check_state_len(n_state_values, n * size, "states", "index", err, errlen);
    if (rc) return rc;
    ig_scratch sc;
    rc = ig_scratch_init(&sc, ix->n_shards, err, errlen);
    for (int64_t i = 0; i < n && !rc; i++) {
        char name[64];
        snprintf(name, sizeof name, "states[%lld]", (long long)i);
        int64_t l = ig_state_load(ix, states + i * size, sc.a, name, err, errlen);
        if (l < 0) rc = (int)l;
        else if (values) {
            snprintf(name, sizeof name, "contexts[%lld]", (long long)i);
            rc = check_extend(ix, l, values + offsets[i], offsets[i + 1] - offsets[i], name, err, errlen);
        }
    }
    ig_scratch_free(&sc);
    return rc;
}

int ig_state_extend_batch(const ig_index *ix, const int64_t *states, int64_t n_state_values, const uint32_t *values,
                          int64_t n_values, const int64_t *offsets, int64_t n, int64_t *out, int n_threads, char *err,
                          size_t errlen) {
    int rc = ig_check_batch(ix, values, n_values, offsets, n, "contexts", err, errlen);
    if (!rc && n == 0) rc = ig_check_state_len(n_state_values, 0, "states", "index", err, errlen);
    if (rc || n == 0) return rc;
    if (!out) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    if ((rc = ig_check_states(ix, states, n_state_values, n, values, offsets, err, errlen))) return rc;
    extend_job j = {ix, states, values, offsets, out};
    rc = ig_parallel_for(n, ig_resolve_threads(n_threads, n, 64), IG_EXTEND_BLOCK, extend_work, &j);
    return rc ? ig_fail(err, errlen, rc, "out of memory") : IG_OK;
}

int ig_state_prob_batch(const ig_index *ix, const int64_t *states, int64_t n_state_values, int64_t n,
                        const uint32_t *tokens, uint64_t *count, uint64_t *prompt_count, int64_t *suffix_len,
                        uint8_t *sparse, int n_threads, char *err, size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (n < 0) return ig_fail(err, errlen, IG_ERR_ARG, "negative number of states");
    if (n == 0) return ig_check_state_len(n_state_values, 0, "states", "index", err, errlen);
    if (!tokens || !count || !prompt_count || !suffix_len) return ig_fail(err, errlen, IG_ERR_ARG, "NULL tokens or output");
    int rc = ig_check_ids(ix, tokens, n, "tokens", err, errlen);
    if (!rc) rc = ig_check_states(ix, states, n_state_values, n, NULL, NULL, err, errlen);
    if (rc) return rc;
    ig_rows rows = {states, NULL, NULL, 1};
    return ig_prob_rows(ix, &rows, n, tokens, count, prompt_count, suffix_len, sparse, n_threads, err, errlen);
}
