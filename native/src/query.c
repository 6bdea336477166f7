/* query.c - exact n-gram / ∞-gram queries over the suffix arrays of all shards.
 *
 * Tokens compare as numbers, so the suffixes in a range that share a prefix of length d are
 * ordered by their token at depth d: narrowing a range by one more token is two binary searches
 * that read one token each, and a next-token distribution is a walk over run boundaries.
 */
#include <stdlib.h>

#include "query_internal.h"
#include "ntd_cache.h"
#include "backoff.h"
#include "shard_pool.h"

/* ---------------------------------------------------------------- argument checks */

int ig_check_ids(const ig_index *ix, const uint32_t *q, int64_t len, const char *what,
                     char *err, size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (len < 0) return ig_fail(err, errlen, IG_ERR_ARG, "%s: negative length %lld", what, (long long)len);
    if (len > 0 && !q) return ig_fail(err, errlen, IG_ERR_ARG, "%s: NULL ids", what);
    for (int64_t i = 0; i < len; i++) {
        if (q[i] >= ix->vocab_size) {
            if (q[i] == ix->separator)
                return ig_fail(err, errlen, IG_ERR_ARG,
                               "%s: id %u at position %lld is the document separator, not a token",
                               what, q[i], (long long)i);
            return ig_fail(err, errlen, IG_ERR_ARG,
                           "%s: id %u at position %lld is outside the vocabulary (size %u)", what,
                           q[i], (long long)i, ix->vocab_size);
        }
    }
    return IG_OK;
}

/* ---------------------------------------------------------------- range search in one shard */

/* Compare the m tokens of the suffix at pos starting at depth d with q[0..m). */
static inline int cmp_suffix(const ig_shard *s, int w, int64_t pos, int64_t d, const uint32_t *q,
                             int64_t m) {
    for (int64_t k = 0; k < m; k++) {
        uint64_t t = ig_key_at(s, w, pos + d + k), x = ig_key_of(s, w, q[k]);
        if (t != x) return t < x ? -1 : 1;
    }
    return 0;
}

/* Key at depth d of the suffix ranked r (ordering); tok_rank gives the token itself. */
static inline uint64_t key_rank(const ig_shard *s, int w, int64_t r, int64_t d) {
    return ig_key_at(s, w, ig_sa(s, r) + d);
}

/* Hint the cache about suffix-array entry r: a binary search prefetches both candidate next
   midpoints, so the pointer load of the next step overlaps the token load of this one. */
static inline void prefetch_sa(const ig_shard *s, int64_t r) {
#if defined(__GNUC__)
    __builtin_prefetch(s->sa + (size_t)r * (size_t)s->sa_width);
#else
    (void)s; (void)r;
#endif
}

/* Ranges this short are scanned instead of bisected: their pointers share a cache line or two
   and the token loads are independent, so the CPU overlaps them. */
#define IG_SCAN_MAX 8

/* First rank in [a, b) whose token at depth d is >= t (strict = 0) or > t (strict = 1). */
static inline int64_t bound_tok(const ig_shard *s, int w, int64_t a, int64_t b, int64_t d, uint64_t t,
                                int strict) {
    while (b - a > IG_SCAN_MAX) {
        int64_t mid = a + (b - a) / 2;
        prefetch_sa(s, a + (mid - a) / 2);
        prefetch_sa(s, mid + 1 + (b - mid - 1) / 2);
        uint64_t x = key_rank(s, w, mid, d);
        if (x < t || (strict && x == t)) a = mid + 1; else b = mid;
    }
    while (a < b) {
        uint64_t x = key_rank(s, w, a, d);
        if (!(x < t || (strict && x == t))) break;
        a++;
    }
    return a;
}

/* Sub-range of [r.lo, r.hi) whose suffixes continue with the single token t at depth d. One
   bisection until a rank holding t is hit, then the two bounds are searched on either side of it
   (an "equal range" search: about half the probes of two independent bisections). */
ig_range ig_narrow1(const ig_shard *s, int w, ig_range r, int64_t d, uint32_t tok) {
    ig_range out; /* a frequent short context: search its precomputed next tokens instead */
    if (s->ntc_n && d >= 1 && d <= IG_NTC_MAX_DEPTH && r.hi - r.lo >= 64 && ig_ntc_narrow(s, d, r, tok, &out))
        return out;
    uint64_t t = ig_key_of(s, w, tok);
    int64_t a = r.lo, b = r.hi;
    while (b - a > IG_SCAN_MAX) {
        int64_t mid = a + (b - a) / 2;
        prefetch_sa(s, a + (mid - a) / 2);
        prefetch_sa(s, mid + 1 + (b - mid - 1) / 2);
        uint64_t x = key_rank(s, w, mid, d);
        if (x < t) a = mid + 1;
        else if (x > t) b = mid;
        else return (ig_range){bound_tok(s, w, a, mid, d, t, 0), bound_tok(s, w, mid + 1, b, d, t, 1)};
    }
    int64_t lo = bound_tok(s, w, a, b, d, t, 0);
    return (ig_range){lo, bound_tok(s, w, lo, b, d, t, 1)};
}

/* Ranks of r (sharing a prefix of length d) whose suffix continues with q[0..m): checked one by
   one by reading the text, for ranges already short. The matches are contiguous (ranks are
   sorted), and an empty result sits where q would be inserted. */
static ig_range verify_range(const ig_shard *s, int w, ig_range r, int64_t d, const uint32_t *q, int64_t m) {
    int64_t below = 0, upto = 0;
    for (int64_t k = r.lo; k < r.hi; k++) {
        int c = cmp_suffix(s, w, ig_sa(s, k), d, q, m);
        below += c < 0;
        upto += c <= 0;
    }
    return (ig_range){r.lo + below, r.lo + upto};
}

/* Sub-range of r whose suffixes continue with q[0..m) at depth d: narrowed one token at a time
   (each step bisects only what the previous one left), then verified against the text once the
   range is short, so a long query costs a few bisections plus one sequential read. */
ig_range ig_narrow(const ig_shard *s, int w, ig_range r, int64_t d, const uint32_t *q, int64_t m) {
    for (int64_t k = 0; k < m; k++) {
        if (r.hi - r.lo <= IG_SCAN_MAX) return verify_range(s, w, r, d + k, q + k, m - k);
        r = ig_narrow1(s, w, r, d + k, q[k]);
        if (r.hi <= r.lo) break;
    }
    return r;
}

ig_range ig_first_token_range(const ig_shard *s, int w, uint32_t t) {
    if (s->uni_key_rank) { /* official: entries sorted by id, their ranks in key order */
        int64_t a = 0, b = s->n_uni;
        while (a < b) {
            int64_t mid = a + (b - a) / 2;
            if (s->uni[2 * mid] < t) a = mid + 1; else b = mid;
        }
        if (a < s->n_uni && s->uni[2 * a] == t)
            return (ig_range){s->uni_key_rank[a], s->uni_key_rank[a] + (int64_t)s->uni[2 * a + 1]};
        return (ig_range){0, 0};
    }
    if (s->uni_start) return (ig_range){s->uni_start[t], s->uni_start[t + 1]};
    if (s->uni_rank) { /* the unigram entry of t, by binary search (tokens strictly increase) */
        int64_t a = 0, b = s->n_uni;
        while (a < b) {
            int64_t mid = a + (b - a) / 2;
            if (s->uni[2 * mid] < t) a = mid + 1; else b = mid;
        }
        int64_t hi = a < s->n_uni && s->uni[2 * a] == t ? s->uni_rank[a + 1] : s->uni_rank[a];
        return (ig_range){s->uni_rank[a], hi};
    }
    return ig_narrow1(s, w, (ig_range){0, s->num_tokens}, 0, t);
}

ig_range ig_find_in_shard(const ig_shard *s, int w, const uint32_t *q, int64_t len) {
    if (len == 0) return (ig_range){0, s->num_tokens};
    ig_range r = ig_first_token_range(s, w, q[0]);
    if (len > 1 && r.hi > r.lo) r = ig_narrow(s, w, r, 1, q + 1, len - 1);
    return r;
}

/* Ranges of q in every shard (at once while the index is cold: shard_pool.h); returns the
   total count. */
typedef struct {
    const ig_index *ix;
    const uint32_t *q;
    int64_t len;
    ig_range *out;
} find_step;

static void find_one(void *ctx, int i) {
    find_step *f = ctx;
    f->out[i] = ig_find_in_shard(&f->ix->shards[i], f->ix->token_width, f->q, f->len);
}

uint64_t ig_find_all(const ig_index *ix, const uint32_t *q, int64_t len, ig_range *out) {
    if (ix->n_shards == 1) {
        out[0] = ig_find_in_shard(&ix->shards[0], ix->token_width, q, len);
        return (uint64_t)(out[0].hi - out[0].lo);
    }
    find_step f = {ix, q, len, out};
    ig_each_shard(ix, find_one, &f);
    uint64_t c = 0;
    for (int i = 0; i < ix->n_shards; i++) c += (uint64_t)(out[i].hi - out[i].lo);
    return c;
}

int ig_scratch_init(ig_scratch *sc, int n, char *err, size_t errlen) {
    sc->heap = NULL;
    ig_range *base = sc->stack;
    if (n > IG_STACK_SHARDS) {
        sc->heap = malloc(3 * (size_t)n * sizeof(ig_range));
        if (!sc->heap) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
        base = sc->heap;
    }
    sc->a = base;
    sc->b = base + n;
    sc->c = base + 2 * n;
    return IG_OK;
}
void ig_scratch_free(ig_scratch *sc) { free(sc->heap); }

/* ---------------------------------------------------------------- counting */

int ig_find(const ig_index *ix, const uint32_t *q, int64_t len, int64_t *lo, int64_t *hi,
            char *err, size_t errlen) {
    int rc = ig_check_ids(ix, q, len, "find", err, errlen);
    if (rc) return rc;
    ig_scratch sc;
    if ((rc = ig_scratch_init(&sc, ix->n_shards, err, errlen))) return rc;
    ig_find_all(ix, q, len, sc.a);
    for (int i = 0; i < ix->n_shards; i++) {
        lo[i] = sc.a[i].lo;
        hi[i] = sc.a[i].hi;
    }
    ig_scratch_free(&sc);
    return IG_OK;
}

int ig_count(const ig_index *ix, const uint32_t *q, int64_t len, uint64_t *count, char *err,
             size_t errlen) {
    int rc = ig_check_ids(ix, q, len, "count", err, errlen);
    if (rc) return rc;
    ig_scratch sc;
    if ((rc = ig_scratch_init(&sc, ix->n_shards, err, errlen))) return rc;
    *count = ig_find_all(ix, q, len, sc.a);
    ig_scratch_free(&sc);
    return IG_OK;
}

/* ---------------------------------------------------------------- next-token distributions */

/* Distinct tokens at depth d over one shard's range, with counts, by galloping over runs. */
static int64_t walk_range(const ig_shard *s, int w, ig_range r, int64_t d, uint32_t *toks,
                          uint64_t *cnts, int64_t cap);

/* Sort (toks, cnts)[0..n) by token and add up equal tokens; returns the new length. An official
   shard's runs come in key order, and its end-of-document occurrences in two runs (the end of the
   file first, the separators last). */
typedef struct {
    uint32_t t;
    uint64_t c;
} tc_pair;
static int by_token(const void *x, const void *y) {
    uint32_t a = ((const tc_pair *)x)->t, b = ((const tc_pair *)y)->t;
    return (a > b) - (a < b);
}

int64_t ig_sort_merge_tc(uint32_t *toks, uint64_t *cnts, int64_t n) {
    int sorted = 1;
    for (int64_t i = 1; i < n && sorted; i++) sorted = toks[i - 1] <= toks[i];
    if (!sorted) {
        tc_pair *v = malloc((size_t)n * sizeof *v);
        if (!v) return -1;
        for (int64_t i = 0; i < n; i++) v[i] = (tc_pair){toks[i], cnts[i]};
        qsort(v, (size_t)n, sizeof *v, by_token);
        for (int64_t i = 0; i < n; i++) { toks[i] = v[i].t; cnts[i] = v[i].c; }
        free(v);
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m > 0 && toks[m - 1] == toks[i]) cnts[m - 1] += cnts[i];
        else { toks[m] = toks[i]; cnts[m++] = cnts[i]; }
    }
    return m;
}

int64_t ig_walk_range(const ig_shard *s, int w, ig_range r, int64_t d, uint32_t *toks,
                          uint64_t *cnts, int64_t cap) {
    int64_t n = walk_range(s, w, r, d, toks, cnts, cap);
    if (!s->official || n > cap || (d == 0 && r.lo == 0 && r.hi == s->num_tokens)) return n;
    int64_t m = ig_sort_merge_tc(toks, cnts, n);
    return m < 0 ? n : m;
}

static int64_t walk_range(const ig_shard *s, int w, ig_range r, int64_t d, uint32_t *toks,
                          uint64_t *cnts, int64_t cap) {
    int64_t n = 0, i = r.lo;
    if (d == 0 && r.lo == 0 && r.hi == s->num_tokens) { /* the unigram is stored */
        for (int64_t j = 0; j < s->n_uni; j++, n++)
            if (n < cap) { toks[n] = (uint32_t)s->uni[2 * j]; cnts[n] = s->uni[2 * j + 1]; }
        return n;
    }
    if (d >= 1 && d <= IG_NTC_MAX_DEPTH && s->ntc_n) { /* precomputed at build time? */
        int64_t m;
        const uint32_t *e = ig_ntc_find(s, d, r, &m);
        if (e) return ig_ntc_copy(e, m, r, toks, cnts, cap);
    }
    if (r.hi - r.lo <= 4 * IG_SCAN_MAX) { /* short: read every token (independent loads) */
        uint32_t prev = 0;
        for (; i < r.hi; i++) {
            uint32_t t = tok_rank(s, w, i, d);
            if (n > 0 && t == prev) {
                if (n <= cap) cnts[n - 1]++;
                continue;
            }
            if (n < cap) { toks[n] = t; cnts[n] = 1; }
            n++;
            prev = t;
        }
        return n;
    }
    while (i < r.hi) {
        uint32_t t = tok_rank(s, w, i, d);
        int64_t step = 1, last = i; /* last rank known to hold t */
        while (i + step < r.hi && tok_rank(s, w, i + step, d) == t) { last = i + step; step <<= 1; }
        int64_t a = last + 1, b = i + step < r.hi ? i + step : r.hi;
        while (a < b) {
            int64_t mid = a + (b - a) / 2;
            if (tok_rank(s, w, mid, d) == t) a = mid + 1; else b = mid;
        }
        if (n < cap) { toks[n] = t; cnts[n] = (uint64_t)(a - i); }
        n++;
        i = a;
    }
    return n;
}

/* Merge the sorted lists (t1, c1, n1) and (t2, c2, n2) into (tt, tc), which must hold n1 + n2
   entries and not overlap the inputs; returns the merged length. */
static int64_t merge_lists(const uint32_t *t1, const uint64_t *c1, int64_t n1, const uint32_t *t2,
                           const uint64_t *c2, int64_t n2, uint32_t *tt, uint64_t *tc) {
    int64_t i = 0, j = 0, n = 0;
    while (i < n1 || j < n2) {
        if (j >= n2 || (i < n1 && t1[i] < t2[j])) { tt[n] = t1[i]; tc[n++] = c1[i++]; }
        else if (i >= n1 || t2[j] < t1[i]) { tt[n] = t2[j]; tc[n++] = c2[j++]; }
        else { tt[n] = t1[i]; tc[n++] = c1[i++] + c2[j++]; }
    }
    return n;
}

/* One shard's walk of a multi-shard distribution, into its own part of the scratch. */
typedef struct {
    const ig_index *ix;
    const ig_range *rs;
    int64_t d;
    uint32_t *t;  /* all shards' parts, shard i's at at[i] */
    uint64_t *c;
    int64_t *at;  /* n_shards + 1 offsets; shard i may hold at[i + 1] - at[i] entries */
    int64_t *m;   /* per shard: its walk's length */
} ntd_walk_step;

static void ntd_walk_one(void *ctx, int i) {
    ntd_walk_step *s = ctx;
    int64_t a = s->at[i];
    s->m[i] = s->rs[i].hi > s->rs[i].lo ? ig_walk_range(&s->ix->shards[i], s->ix->token_width, s->rs[i], s->d,
                                                        s->t + a, s->c + a, s->at[i + 1] - a) : 0;
}

/* Distribution at depth d over per-shard ranges, summed over shards. */
int ig_ntd_ranges(const ig_index *ix, const ig_range *rs, int64_t d, uint32_t *toks,
                      uint64_t *cnts, int64_t cap, int64_t *n_out, char *err, size_t errlen) {
    int w = ix->token_width, ns = ix->n_shards;
    if (ns == 1) {
        int64_t n = ig_walk_range(&ix->shards[0], w, rs[0], d, toks, cnts, cap);
        *n_out = n;
        return n > cap ? ig_fail(err, errlen, IG_ERR_CAPACITY, "need %lld entries", (long long)n) : IG_OK;
    }
    /* Several shards: walk each into its own scratch (at once when the index is cold:
       shard_pool.h), then merge them in shard order into the output. A valid index has at most
       min(vocab_size + 1, occurrences) distinct next tokens, in all and in each shard: size the
       buffers by that, not by the vocabulary (2^32 entries for a 32-bit one). More entries only
       come from corrupt files. */
    int64_t vmax = (int64_t)ix->vocab_size + 2; /* (+1: an official shard's two end-of-document runs) */
    int64_t occ = 0, *at = malloc(((size_t)ns + 1) * sizeof *at), *m = malloc((size_t)ns * sizeof *m);
    int rc = at && m ? IG_OK : ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    for (int i = 0; at && i < ns; i++) {
        int64_t o = rs[i].hi > rs[i].lo ? rs[i].hi - rs[i].lo : 0;
        at[i] = occ; /* (occ here: the parts so far) */
        occ += o < vmax ? o : vmax;
    }
    if (at) at[ns] = occ;
    int64_t full = vmax; /* the merged distribution's bound */
    if (occ < full) full = occ > 0 ? occ : 1;
    uint32_t *st = malloc((size_t)(occ > 0 ? occ : 1) * sizeof(uint32_t)); /* every shard's walk */
    uint64_t *sc = malloc((size_t)(occ > 0 ? occ : 1) * sizeof(uint64_t));
    uint32_t *mt = malloc((size_t)full * sizeof(uint32_t));     /* merged so far */
    uint64_t *mc = malloc((size_t)full * sizeof(uint64_t));
    uint32_t *tt = malloc((size_t)full * 2 * sizeof(uint32_t)); /* merge target */
    uint64_t *tc = malloc((size_t)full * 2 * sizeof(uint64_t));
    int64_t n = 0;
    if (!rc && (!st || !sc || !mt || !mc || !tt || !tc)) rc = ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    if (!rc) {
        ntd_walk_step step = {ix, rs, d, st, sc, at, m};
        ig_each_shard(ix, ntd_walk_one, &step);
    }
    for (int i = 0; i < ns && !rc; i++) {
        if (rs[i].hi <= rs[i].lo) continue;
        int64_t room = at[i + 1] - at[i];
        if (m[i] <= room) n = merge_lists(mt, mc, n, st + at[i], sc + at[i], m[i], tt, tc);
        if (m[i] > room || n > full) {
            rc = ig_fail(err, errlen, IG_ERR_FORMAT, "shard %d: suffix array or tokens are corrupt", i);
            break;
        }
        memcpy(mt, tt, (size_t)n * sizeof *mt);
        memcpy(mc, tc, (size_t)n * sizeof *mc);
    }
    if (!rc && n <= cap) {
        memcpy(toks, mt, (size_t)n * sizeof *toks);
        memcpy(cnts, mc, (size_t)n * sizeof *cnts);
    }
    free(st); free(sc); free(mt); free(mc); free(tt); free(tc); free(at); free(m);
    if (rc) return rc;
    *n_out = n;
    return n > cap ? ig_fail(err, errlen, IG_ERR_CAPACITY, "need %lld entries", (long long)n) : IG_OK;
}

int ig_ntd(const ig_index *ix, const uint32_t *q, int64_t len, uint32_t *tokens, uint64_t *counts,
           int64_t cap, int64_t *n_out, uint64_t *total, char *err, size_t errlen) {
    int rc = ig_check_ids(ix, q, len, "ntd", err, errlen);
    if (rc) return rc;
    ig_scratch sc;
    if ((rc = ig_scratch_init(&sc, ix->n_shards, err, errlen))) return rc;
    *total = ig_find_all(ix, q, len, sc.a);
    rc = ig_ntd_ranges(ix, sc.a, len, tokens, counts, cap, n_out, err, errlen);
    ig_scratch_free(&sc);
    return rc;
}

/* ---------------------------------------------------------------- ∞-gram */

/* Once a matched suffix has at most this many occurrences, they are read directly instead of
   searching longer suffixes. */
#define IG_ENUM_MAX 48

/* How many tokens before the occurrences ranked in rs match the prompt read backwards from
   p[start - 1]: the maximum over occurrences, at most cap. Every occurrence of a longer suffix of
   the prompt contains one of these occurrences, so this extends the match exactly. */
static int64_t left_extension_in(const ig_index *ix, int i, const ig_range *rs, const uint32_t *p, int64_t start,
                                 int64_t cap) {
    const ig_shard *s = &ix->shards[i];
    int w = ix->token_width;
    int64_t best = 0;
    for (int64_t r = rs[i].lo; r < rs[i].hi; r++) { /* independent loads: let them overlap */
        int64_t pos = ig_sa(s, r); /* (no pointer below the array for position 0) */
        if (pos > 0) __builtin_prefetch(s->tokens + (size_t)(pos - 1) * (size_t)w);
    }
    for (int64_t r = rs[i].lo; r < rs[i].hi && best < cap; r++) {
        int64_t pos = ig_sa(s, r), k = 0; /* positions before 0 read as the separator */
        while (k < cap && ig_tok(s, w, pos - 1 - k) == p[start - 1 - k]) k++;
        if (k > best) best = k;
    }
    return best;
}

typedef struct {
    const ig_index *ix;
    const ig_range *rs;
    const uint32_t *p;
    int64_t start, cap;
    int64_t *best; /* per shard */
} left_step;

static void left_extension_one(void *ctx, int i) {
    left_step *e = ctx;
    e->best[i] = left_extension_in(e->ix, i, e->rs, e->p, e->start, e->cap);
}

/* The maximum over shards (each shard's own, so it does not matter which ran first). */
static int64_t left_extension(const ig_index *ix, const ig_range *rs, const uint32_t *p, int64_t start,
                              int64_t cap) {
    int64_t stack[IG_STACK_SHARDS], out = 0;
    int64_t *best = ix->n_shards <= IG_STACK_SHARDS ? stack : malloc((size_t)ix->n_shards * sizeof *best);
    if (!best) { /* (out of memory: one shard after another) */
        for (int i = 0; i < ix->n_shards && out < cap; i++) {
            int64_t k = left_extension_in(ix, i, rs, p, start, cap);
            if (k > out) out = k;
        }
        return out;
    }
    left_step e = {ix, rs, p, start, cap, best};
    ig_each_shard(ix, left_extension_one, &e);
    for (int i = 0; i < ix->n_shards; i++)
        if (best[i] > out) out = best[i];
    if (best != stack) free(best);
    return out;
}

/* Longest suffix (<= max_len) of p[0..len) with a non-zero count; its ranges are left in `best`
   (`tmp` is scratch). Lengths double while the count stays large, then bisect between the
   longest length known to occur and the shortest known not to; as soon as the known suffix has
   few occurrences, their left contexts in the text give the answer at once. */
int64_t ig_longest_suffix(const ig_index *ix, const uint32_t *p, int64_t len, int64_t max_len,
                       ig_range *best, ig_range *tmp) {
    size_t sz = (size_t)ix->n_shards * sizeof *best;
    if (max_len > len) max_len = len;
    if (max_len < 0) max_len = 0;
    uint64_t cnt = ig_find_all(ix, p + len, 0, best);
    int64_t good = 0, bad = max_len + 1; /* good occurs (ranges in best); bad does not, or is too long */
    for (int64_t l = 1; l < bad && !(good && cnt <= IG_ENUM_MAX);) {
        uint64_t c = ig_find_all(ix, p + len - l, l, tmp);
        if (!c) { bad = l; break; }
        good = l;
        cnt = c;
        memcpy(best, tmp, sz);
        if (l == max_len) break;
        l = l * 2 > max_len ? max_len : l * 2;
    }
    while (bad - good > 1) {
        if (good && cnt <= IG_ENUM_MAX) { /* (the empty suffix misses occurrences at document ends) */
            int64_t ext = left_extension(ix, best, p, len - good, bad - 1 - good);
            if (ext) {
                good += ext;
                ig_find_all(ix, p + len - good, good, best);
            }
            return good;
        }
        int64_t mid = good + (bad - good) / 2;
        uint64_t c = ig_find_all(ix, p + len - mid, mid, tmp);
        if (c) {
            good = mid;
            cnt = c;
            memcpy(best, tmp, sz);
        } else {
            bad = mid;
        }
    }
    return good;
}

int ig_infgram_suffix(const ig_index *ix, const uint32_t *prompt, int64_t len, int64_t *suffix_len,
                      char *err, size_t errlen) {
    int rc = ig_check_ids(ix, prompt, len, "infgram", err, errlen);
    if (rc) return rc;
    ig_scratch sc;
    if ((rc = ig_scratch_init(&sc, ix->n_shards, err, errlen))) return rc;
    *suffix_len = ig_longest_suffix(ix, prompt, len, len, sc.a, sc.b);
    ig_scratch_free(&sc);
    return IG_OK;
}

/* One shard's part of the sparse test: -1 when its range is empty, -2 when its occurrences
   continue with different tokens, else the one token they all continue with. */
static int64_t one_next_token(const ig_index *ix, int i, const ig_range *rs, int64_t d) {
    if (rs[i].hi <= rs[i].lo) return -1;
    const ig_shard *s = &ix->shards[i];
    uint32_t a = tok_rank(s, ix->token_width, rs[i].lo, d);
    uint32_t b = tok_rank(s, ix->token_width, rs[i].hi - 1, d);
    /* official: an end of document may rank first (the end of the file) and last */
    if (s->official && a == ix->separator && rs[i].hi - rs[i].lo > 1 &&
        tok_rank(s, ix->token_width, rs[i].lo + 1, d) != ix->separator)
        return -2;
    return a == b ? (int64_t)a : -2;
}

/* Sparse iff every occurrence continues with one and the same token (given each shard's part). */
static int sparse_of(const int64_t *next, int n) {
    int64_t t0 = -1;
    for (int i = 0; i < n; i++) {
        if (next[i] == -1) continue;
        if (next[i] == -2 || (t0 >= 0 && next[i] != t0)) return 0;
        t0 = next[i];
    }
    return t0 >= 0;
}

int ig_is_sparse(const ig_index *ix, const ig_range *rs, int64_t d) {
    int64_t t0 = -1;
    for (int i = 0; i < ix->n_shards; i++) { /* (stops at the first shard that decides) */
        int64_t t = one_next_token(ix, i, rs, d);
        if (t == -1) continue;
        if (t == -2 || (t0 >= 0 && t != t0)) return 0;
        t0 = t;
    }
    return t0 >= 0;
}

/* The range of context + t in shard i, from the context's range at depth d. */
static ig_range extend_in(const ig_index *ix, int i, const ig_range *rs, int64_t d, uint32_t t) {
    const ig_shard *s = &ix->shards[i];
    if (d == 0 && rs[i].lo == 0 && rs[i].hi == s->num_tokens) return ig_first_token_range(s, ix->token_width, t);
    return rs[i].hi > rs[i].lo ? ig_narrow1(s, ix->token_width, rs[i], d, t) : rs[i];
}

typedef struct {
    const ig_index *ix;
    const ig_range *rs;
    int64_t d;
    uint32_t t;
    ig_range *next;
    int64_t *next_token; /* NULL, or per shard: one_next_token */
} extend_step;

static void extend_one(void *ctx, int i) {
    extend_step *e = ctx;
    e->next[i] = extend_in(e->ix, i, e->rs, e->d, e->t);
    if (e->next_token) e->next_token[i] = one_next_token(e->ix, i, e->rs, e->d);
}

uint64_t ig_extend_ranges(const ig_index *ix, const ig_range *rs, int64_t d, uint32_t t, ig_range *next) {
    extend_step e = {ix, rs, d, t, next, NULL};
    if (ix->n_shards == 1) extend_one(&e, 0);
    else ig_each_shard(ix, extend_one, &e);
    uint64_t c = 0;
    for (int i = 0; i < ix->n_shards; i++) c += (uint64_t)(next[i].hi - next[i].lo);
    return c;
}

/* count(context + token) and count(context) given the context's ranges at depth d: the
   narrowing and the sparse test of a shard are one step (the sparse test reads two entries of
   the same range, so a cold shard reads them together with its narrowing). */
void ig_prob_from_ranges(const ig_index *ix, const ig_range *rs, int64_t d, uint32_t token,
                             ig_range *next, ig_prob *out) {
    uint64_t den = 0;
    for (int i = 0; i < ix->n_shards; i++) den += (uint64_t)(rs[i].hi - rs[i].lo);
    int64_t stack[IG_STACK_SHARDS];
    int64_t *nt = ix->n_shards <= IG_STACK_SHARDS ? stack : malloc((size_t)ix->n_shards * sizeof *nt);
    if (!nt) { /* (out of memory: the two steps apart) */
        out->count = ig_extend_ranges(ix, rs, d, token, next);
        out->sparse = ig_is_sparse(ix, rs, d);
    } else {
        extend_step e = {ix, rs, d, token, next, nt};
        if (ix->n_shards == 1) extend_one(&e, 0);
        else ig_each_shard(ix, extend_one, &e);
        uint64_t c = 0;
        for (int i = 0; i < ix->n_shards; i++) c += (uint64_t)(next[i].hi - next[i].lo);
        out->count = c;
        out->sparse = sparse_of(nt, ix->n_shards);
        if (nt != stack) free(nt);
    }
    out->prompt_count = den;
    out->suffix_len = d;
}

static int prob_common(const ig_index *ix, const uint32_t *prompt, int64_t len, uint32_t token,
                       ig_prob *out, int infinite, char *err, size_t errlen) {
    int rc = ig_check_ids(ix, prompt, len, infinite ? "infgram_prob prompt" : "ngram_prob prompt", err, errlen);
    if (!rc) rc = ig_check_ids(ix, &token, 1, "token", err, errlen);
    if (rc) return rc;
    ig_scratch sc;
    if ((rc = ig_scratch_init(&sc, ix->n_shards, err, errlen))) return rc;
    int64_t d = len;
    if (infinite) d = ig_longest_suffix(ix, prompt, len, len, sc.a, sc.b);
    else ig_find_all(ix, prompt, len, sc.a);
    ig_prob_from_ranges(ix, sc.a, d, token, sc.c, out);
    ig_scratch_free(&sc);
    return IG_OK;
}

int ig_infgram_prob(const ig_index *ix, const uint32_t *prompt, int64_t len, uint32_t token,
                    ig_prob *out, char *err, size_t errlen) {
    return prob_common(ix, prompt, len, token, out, 1, err, errlen);
}

int ig_ngram_prob(const ig_index *ix, const uint32_t *prompt, int64_t len, uint32_t token,
                  ig_prob *out, char *err, size_t errlen) {
    return prob_common(ix, prompt, len, token, out, 0, err, errlen);
}

/* ---------------------------------------------------------------- dense scoring */

/* Dense scoring of ids[begin..end) with all of ids[0..begin) as context (outputs are indexed
   like ids). The state starts at the longest suffix of ids[0..begin) and is extended token by
   token: one narrowing while the match grows, a back-off (backoff.h: linear in the query
   whatever the corpus) when it does not. Scoring a sequence in pieces gives exactly the same
   numbers. Stops with IG_ERR_CANCELLED once *cancel is set (checked every IG_CANCEL_EVERY tokens). */
int ig_score_span(const ig_index *ix, const uint32_t *ids, int64_t begin, int64_t end, uint64_t *num,
               uint64_t *den, int64_t *suffix_len, uint8_t *sparse, ig_scratch *sc, const int *cancel) {
    ig_range *cur = sc->a, *next = sc->b, *tmp = sc->c;
    ig_lce_memo *memo = NULL;
    int rc = IG_OK;
    int64_t l = ig_longest_suffix(ix, ids, begin, begin, cur, tmp);
    for (int64_t i = begin; i < end; i++) {
        if ((i - begin) % IG_CANCEL_EVERY == IG_CANCEL_EVERY - 1 && ig_cancelled(cancel)) {
            rc = IG_ERR_CANCELLED;
            break;
        }
        ig_prob p;
        ig_prob_from_ranges(ix, cur, l, ids[i], next, &p);
        num[i] = p.count;
        den[i] = p.prompt_count;
        suffix_len[i] = l;
        if (sparse) sparse[i] = (uint8_t)p.sparse;
        if (p.count > 0) { /* the context grows by one token: its range is `next` */
            ig_range *t = cur; cur = next; next = t;
            l++;
        } else if (i + 1 < end) { /* back off: the new suffix is at most l long */
            l = ig_backoff(ix, ids, i + 1, l, cur, tmp, &memo);
        }
    }
    ig_lce_memo_free(memo);
    return rc;
}

int ig_score(const ig_index *ix, const uint32_t *ids, int64_t n, uint64_t *num, uint64_t *den,
             int64_t *suffix_len, uint8_t *sparse, char *err, size_t errlen) {
    int rc = ig_check_ids(ix, ids, n, "score", err, errlen);
    if (rc) return rc;
    ig_scratch sc;
    if ((rc = ig_scratch_init(&sc, ix->n_shards, err, errlen))) return rc;
    ig_score_span(ix, ids, 0, n, num, den, suffix_len, sparse, &sc, NULL);
    ig_scratch_free(&sc);
    return IG_OK;
}
