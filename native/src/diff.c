/* diff.c - queries over the difference of two indexes (plus minus minus), built on the range
 * primitives of query.c. Every answer is what an index of plus's documents without minus's
 * documents would give: the net counts are the counts of that corpus, so they shrink as an
 * n-gram grows, and the ∞-gram's exponential + binary search over the suffix length stays valid.
 * A negative net count proves that minus is not a subset of plus: the query fails, loudly.
 */
#include <stdlib.h>

#include "query_internal.h"
#include "backoff.h"
#include "diff_internal.h"

int ig_diff_not_subset(char *err, size_t errlen) {
    return ig_fail(err, errlen, IG_ERR_ARG,
                   "the subtracted index is not a subset of the index: a net count would be negative");
}

int ig_diff_check_pair(const ig_index *P, const ig_index *M, char *err, size_t errlen) {
    if (!P || !M) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (P->token_width != M->token_width || P->vocab_size != M->vocab_size)
        return ig_fail(err, errlen, IG_ERR_ARG,
                       "the subtracted index has token width/vocab %d/%u, the index %d/%u",
                       M->token_width, M->vocab_size, P->token_width, P->vocab_size);
    return IG_OK;
}

/* Scratch range arrays for both indexes (cur, next, tmp each). */
typedef struct {
    ig_scratch p, m;
} pair_scratch;

static int pair_init(pair_scratch *ps, const ig_index *P, const ig_index *M, char *err, size_t errlen) {
    int rc = ig_scratch_init(&ps->p, P->n_shards, err, errlen);
    if (rc) return rc;
    if ((rc = ig_scratch_init(&ps->m, M->n_shards, err, errlen))) ig_scratch_free(&ps->p);
    return rc;
}

static void pair_free(pair_scratch *ps) {
    ig_scratch_free(&ps->p);
    ig_scratch_free(&ps->m);
}

static int64_t range_sum(const ig_index *ix, const ig_range *r) {
    int64_t c = 0;
    for (int i = 0; i < ix->n_shards; i++) c += r[i].hi - r[i].lo;
    return c;
}

/* Net count of q; its ranges land in rp / rm. */
static int64_t net_find(const ig_index *P, const ig_index *M, const uint32_t *q, int64_t len, ig_range *rp,
                        ig_range *rm) {
    return (int64_t)ig_find_all(P, q, len, rp) - (int64_t)ig_find_all(M, q, len, rm);
}

/* Net count of context + t, from the context's ranges at depth d; narrowed ranges into np / nm. */
static int64_t net_next(const ig_index *P, const ig_index *M, const ig_range *rp, const ig_range *rm, int64_t d,
                        uint32_t t, ig_range *np, ig_range *nm) {
    int64_t c = 0;
    for (int i = 0; i < P->n_shards; i++) {
        np[i] = rp[i].hi > rp[i].lo ? ig_narrow1(&P->shards[i], P->token_width, rp[i], d, t) : rp[i];
        c += np[i].hi - np[i].lo;
    }
    for (int i = 0; i < M->n_shards; i++) {
        nm[i] = rm[i].hi > rm[i].lo ? ig_narrow1(&M->shards[i], M->token_width, rm[i], d, t) : rm[i];
        c -= nm[i].hi - nm[i].lo;
    }
    return c;
}

/* Sparse iff exactly one next token keeps a positive net count. The distinct tokens of plus's
   ranges are visited in order and each gets its net count, until a second positive one shows up
   (usually after two tokens). np / nm are scratch. Sets *neg on a negative count. */
static int net_sparse(const ig_index *P, const ig_index *M, const ig_range *rp, const ig_range *rm, int64_t d,
                      ig_range *np, ig_range *nm, int *neg) {
    /* Fast paths (the caller knows the net count of the context is positive): one distinct
       token in plus stays the one token; with nothing removed here, plus decides alone. */
    if (ig_is_sparse(P, rp, d)) return 1;
    int removed = 0;
    for (int i = 0; i < M->n_shards; i++) removed |= rm[i].hi > rm[i].lo;
    if (!removed) return 0;
    int found = 0, w = P->token_width;
    uint32_t t0 = 0;
    for (int i = 0; i < P->n_shards; i++) {
        const ig_shard *s = &P->shards[i];
        int64_t k = rp[i].lo;
        while (k < rp[i].hi) {
            uint32_t t = tok_rank(s, w, k, d);
            k = ig_narrow1(s, w, (ig_range){k, rp[i].hi}, d, t).hi; /* end of t's run */
            if (found && t == t0) continue;
            int64_t c = net_next(P, M, rp, rm, d, t, np, nm);
            if (c < 0) { *neg = 1; return 0; }
            if (c > 0) {
                if (found) return 0;
                found = 1;
                t0 = t;
            }
        }
    }
    return found;
}

/* count(context + token) and count(context) in net terms, from the context's ranges. */
static int net_prob(const ig_index *P, const ig_index *M, const ig_range *rp, const ig_range *rm, int64_t d,
                    uint32_t token, ig_range *np, ig_range *nm, ig_prob *out, char *err, size_t errlen) {
    int64_t den = range_sum(P, rp) - range_sum(M, rm);
    int64_t num = net_next(P, M, rp, rm, d, token, np, nm);
    if (den < 0 || num < 0) return ig_diff_not_subset(err, errlen);
    int neg = 0;
    ig_range *sp = np + P->n_shards, *sm = nm + M->n_shards; /* see the callers' layout */
    int sparse = den > 0 ? net_sparse(P, M, rp, rm, d, sp, sm, &neg) : 0;
    if (neg) return ig_diff_not_subset(err, errlen);
    out->count = (uint64_t)num;
    out->prompt_count = (uint64_t)den;
    out->suffix_len = d;
    out->sparse = sparse;
    return IG_OK;
}

/* (diff_internal.h) */
int64_t ig_net_longest(const ig_index *P, const ig_index *M, const uint32_t *p, int64_t len, int64_t max_len,
                           ig_range *bp, ig_range *bm, ig_range *tp, ig_range *tm, int *neg) {
    int64_t good = 0, bad = -1;
    if (net_find(P, M, p + len, 0, bp, bm) < 0) *neg = 1;
    if (max_len > len) max_len = len;
    for (int64_t l = 1; l <= max_len; l = (l * 2 > max_len && l < max_len) ? max_len : l * 2) {
        int64_t c = net_find(P, M, p + len - l, l, tp, tm);
        if (c < 0) *neg = 1;
        if (c > 0) {
            good = l;
            memcpy(bp, tp, (size_t)P->n_shards * sizeof *bp);
            memcpy(bm, tm, (size_t)M->n_shards * sizeof *bm);
            if (l == max_len) break;
        } else {
            bad = l;
            break;
        }
    }
    if (bad < 0) return good;
    while (bad - good > 1) {
        int64_t mid = good + (bad - good) / 2;
        int64_t c = net_find(P, M, p + len - mid, mid, tp, tm);
        if (c < 0) *neg = 1;
        if (c > 0) {
            good = mid;
            memcpy(bp, tp, (size_t)P->n_shards * sizeof *bp);
            memcpy(bm, tm, (size_t)M->n_shards * sizeof *bm);
        } else {
            bad = mid;
        }
    }
    return good;
}

/* ---------------------------------------------------------------- public calls */

/* (token, count) pairs of every shard's unigram, sorted by token and summed. */
static int64_t unigram_of(const ig_index *ix, uint64_t **out) {
    int64_t n = 0;
    for (int i = 0; i < ix->n_shards; i++) n += ix->shards[i].n_uni;
    uint64_t *v = malloc((size_t)(n ? n : 1) * 2 * sizeof(uint64_t));
    if (!v) return -1;
    int64_t k = 0;
    for (int i = 0; i < ix->n_shards; i++) {
        memcpy(v + 2 * k, ix->shards[i].uni, (size_t)ix->shards[i].n_uni * 2 * sizeof(uint64_t));
        k += ix->shards[i].n_uni;
    }
    *out = v;
    return n;
}

static int cmp_pair(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int64_t sum_sorted_pairs(uint64_t *v, int64_t n) {
    qsort(v, (size_t)n, 2 * sizeof(uint64_t), cmp_pair);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (k > 0 && v[2 * (k - 1)] == v[2 * i]) {
            v[2 * (k - 1) + 1] += v[2 * i + 1];
        } else {
            v[2 * k] = v[2 * i];
            v[2 * k + 1] = v[2 * i + 1];
            k++;
        }
    }
    return k;
}

int ig_diff_check(const ig_index *P, const ig_index *M, char *err, size_t errlen) {
    int rc = ig_diff_check_pair(P, M, err, errlen);
    if (rc) return rc;
    if (ig_index_has_official(P) || ig_index_has_official(M))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s needs our suffix order, which an official infini-gram index read in place lacks: open it with a sidecar (InfiniGramIndex.open(path, cache_dir=SIDE_DIR), or infinigram-hf prepare PATH --out SIDE_DIR), or convert it (infinigram-hf convert)", "the difference of indexes");
    if (M->num_docs > P->num_docs || M->num_tokens > P->num_tokens)
        return ig_fail(err, errlen, IG_ERR_ARG,
                       "the subtracted index (%llu documents, %llu tokens) is larger than the index (%llu, %llu)",
                       (unsigned long long)M->num_docs, (unsigned long long)M->num_tokens,
                       (unsigned long long)P->num_docs, (unsigned long long)P->num_tokens);
    uint64_t *up = NULL, *um = NULL;
    int64_t np = unigram_of(P, &up), nm = unigram_of(M, &um);
    if (np < 0 || nm < 0) {
        free(up);
        free(um);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    np = sum_sorted_pairs(up, np);
    nm = sum_sorted_pairs(um, nm);
    rc = IG_OK;
    for (int64_t i = 0, j = 0; j < nm; j++) {
        while (i < np && up[2 * i] < um[2 * j]) i++;
        uint64_t have = (i < np && up[2 * i] == um[2 * j]) ? up[2 * i + 1] : 0;
        if (um[2 * j + 1] > have) {
            rc = ig_fail(err, errlen, IG_ERR_ARG,
                         "the subtracted index is not a subset of the index: token %llu occurs %llu times in it, "
                         "%llu times in the index",
                         (unsigned long long)um[2 * j], (unsigned long long)um[2 * j + 1], (unsigned long long)have);
            break;
        }
    }
    free(up);
    free(um);
    return rc;
}

int ig_diff_count(const ig_index *P, const ig_index *M, const uint32_t *q, int64_t len, uint64_t *count,
                  char *err, size_t errlen) {
    int rc = ig_diff_check_pair(P, M, err, errlen);
    if (!rc) rc = ig_check_ids(P, q, len, "count", err, errlen);
    if (rc) return rc;
    pair_scratch ps;
    if ((rc = pair_init(&ps, P, M, err, errlen))) return rc;
    int64_t c = net_find(P, M, q, len, ps.p.a, ps.m.a);
    pair_free(&ps);
    if (c < 0) return ig_diff_not_subset(err, errlen);
    *count = (uint64_t)c;
    return IG_OK;
}

int ig_diff_ntd(const ig_index *P, const ig_index *M, const uint32_t *q, int64_t len, uint32_t *tokens,
                uint64_t *counts, int64_t cap, int64_t *n_out, uint64_t *total, char *err, size_t errlen) {
    int rc = ig_diff_check_pair(P, M, err, errlen);
    if (!rc) rc = ig_check_ids(P, q, len, "ntd", err, errlen);
    if (rc) return rc;
    pair_scratch ps;
    if ((rc = pair_init(&ps, P, M, err, errlen))) return rc;
    int64_t cp = (int64_t)ig_find_all(P, q, len, ps.p.a), cm = (int64_t)ig_find_all(M, q, len, ps.m.a);
    uint32_t *mt = NULL;
    uint64_t *mc = NULL;
    int64_t np = 0, nm = 0;
    if (cm > cp) { rc = ig_diff_not_subset(err, errlen); goto done; }
    /* plus's distribution straight into the caller's buffers, then minus's subtracted in place */
    if ((rc = ig_ntd_ranges(P, ps.p.a, len, tokens, counts, cap, &np, err, errlen))) {
        *n_out = np; /* an upper bound of what the net distribution needs */
        goto done;
    }
    if (cm > 0) {
        int64_t room = cm < (int64_t)P->vocab_size + 1 ? cm : (int64_t)P->vocab_size + 1;
        mt = malloc((size_t)room * sizeof *mt);
        mc = malloc((size_t)room * sizeof *mc);
        if (!mt || !mc) { rc = ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory"); goto done; }
        if ((rc = ig_ntd_ranges(M, ps.m.a, len, mt, mc, room, &nm, err, errlen))) goto done;
    }
    int64_t n = 0, j = 0;
    for (int64_t i = 0; i < np; i++) {
        uint64_t c = counts[i];
        if (j < nm && mt[j] < tokens[i]) break; /* minus has a next token plus lacks */
        if (j < nm && mt[j] == tokens[i]) {
            if (mc[j] > c) break;
            c -= mc[j++];
        }
        if (c) {
            tokens[n] = tokens[i];
            counts[n++] = c;
        }
    }
    if (j < nm) { rc = ig_diff_not_subset(err, errlen); goto done; }
    *n_out = n;
    *total = (uint64_t)(cp - cm);
done:
    free(mt);
    free(mc);
    pair_free(&ps);
    return rc;
}

int ig_diff_infgram_suffix(const ig_index *P, const ig_index *M, const uint32_t *prompt, int64_t len,
                           int64_t *suffix_len, char *err, size_t errlen) {
    int rc = ig_diff_check_pair(P, M, err, errlen);
    if (!rc) rc = ig_check_ids(P, prompt, len, "infgram", err, errlen);
    if (rc) return rc;
    pair_scratch ps;
    if ((rc = pair_init(&ps, P, M, err, errlen))) return rc;
    int neg = 0;
    *suffix_len = ig_net_longest(P, M, prompt, len, len, ps.p.a, ps.m.a, ps.p.b, ps.m.b, &neg);
    pair_free(&ps);
    return neg ? ig_diff_not_subset(err, errlen) : IG_OK;
}

/* The scratch layout shared by prob and score: a = context ranges, b and c = two adjacent
   blocks used as (next, sparse-scratch) by net_prob, which reads np + n_shards. */
static int prob_common(const ig_index *P, const ig_index *M, const uint32_t *prompt, int64_t len, uint32_t token,
                       ig_prob *out, int infinite, char *err, size_t errlen) {
    int rc = ig_diff_check_pair(P, M, err, errlen);
    if (!rc) rc = ig_check_ids(P, prompt, len, infinite ? "infgram_prob prompt" : "ngram_prob prompt", err, errlen);
    if (!rc) rc = ig_check_ids(P, &token, 1, "token", err, errlen);
    if (rc) return rc;
    pair_scratch ps;
    if ((rc = pair_init(&ps, P, M, err, errlen))) return rc;
    int neg = 0;
    int64_t d = len;
    if (infinite) {
        d = ig_net_longest(P, M, prompt, len, len, ps.p.a, ps.m.a, ps.p.b, ps.m.b, &neg);
    } else if (net_find(P, M, prompt, len, ps.p.a, ps.m.a) < 0) {
        neg = 1;
    }
    rc = neg ? ig_diff_not_subset(err, errlen) : net_prob(P, M, ps.p.a, ps.m.a, d, token, ps.p.b, ps.m.b, out, err, errlen);
    pair_free(&ps);
    return rc;
}

int ig_diff_infgram_prob(const ig_index *P, const ig_index *M, const uint32_t *prompt, int64_t len,
                         uint32_t token, ig_prob *out, char *err, size_t errlen) {
    return prob_common(P, M, prompt, len, token, out, 1, err, errlen);
}

int ig_diff_ngram_prob(const ig_index *P, const ig_index *M, const uint32_t *prompt, int64_t len,
                       uint32_t token, ig_prob *out, char *err, size_t errlen) {
    return prob_common(P, M, prompt, len, token, out, 0, err, errlen);
}

int ig_diff_score(const ig_index *P, const ig_index *M, const uint32_t *ids, int64_t n, uint64_t *num,
                  uint64_t *den, int64_t *suffix_len, uint8_t *sparse, const int *cancel, char *err, size_t errlen) {
    int rc = ig_diff_check_pair(P, M, err, errlen);
    if (!rc) rc = ig_check_ids(P, ids, n, "score", err, errlen);
    if (rc) return rc;
    /* four range blocks per index: cur, next + sparse scratch (adjacent), tmp */
    int SP = P->n_shards, SM = M->n_shards;
    ig_range *bp = malloc(4 * (size_t)SP * sizeof *bp), *bm = malloc(4 * (size_t)SM * sizeof *bm);
    if (!bp || !bm) {
        free(bp);
        free(bm);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    ig_range *curp = bp, *nextp = bp + SP, *tmpp = bp + 3 * SP;
    ig_range *curm = bm, *nextm = bm + SM, *tmpm = bm + 3 * SM;
    int neg = 0;
    int64_t l = 0;
    ig_lce_memo *memo = NULL;
    if (net_find(P, M, ids, 0, curp, curm) < 0) neg = 1;
    for (int64_t i = 0; i < n && !neg && !rc; i++) {
        if (i % IG_CANCEL_EVERY == IG_CANCEL_EVERY - 1 && ig_cancelled(cancel)) {
            rc = ig_fail(err, errlen, IG_ERR_CANCELLED, "cancelled");
            break;
        }
        ig_prob p;
        if ((rc = net_prob(P, M, curp, curm, l, ids[i], nextp, nextm, &p, err, errlen))) break;
        num[i] = p.count;
        den[i] = p.prompt_count;
        suffix_len[i] = l;
        if (sparse) sparse[i] = (uint8_t)p.sparse;
        if (p.count > 0) { /* the context grows by one token: its ranges are next* */
            memcpy(curp, nextp, (size_t)SP * sizeof *curp);
            memcpy(curm, nextm, (size_t)SM * sizeof *curm);
            l++;
        } else if (i + 1 < n) { /* back off: the new suffix is at most l long (backoff.h) */
            int64_t k = -1;
            if (l > IG_BACKOFF_SHORT)
                k = ig_backoff_long(P, M, ids, i + 1, l, IG_BACKOFF_SHORT, curp, curm, tmpp, tmpm, &memo, &neg);
            if (k == -1 && l > IG_BACKOFF_SHORT) l = IG_BACKOFF_SHORT;
            l = k >= 0 ? k : ig_net_longest(P, M, ids, i + 1, l, curp, curm, tmpp, tmpm, &neg);
        }
    }
    ig_lce_memo_free(memo);
    free(bp);
    free(bm);
    if (!rc && neg) rc = ig_diff_not_subset(err, errlen);
    return rc;
}
