/* lm.c - the standalone ∞-gram LM: dense scoring, per-level statistics, distributions and
 * sampling for the ∞-gram, the selective back-off interpolation and the Kneser-Ney family.
 *
 * State: a table of suffix-array ranges, row L = the range of the last L tokens of the context
 * (rows 0..depth nonempty, depth <= the context cap). Appending token t turns row L into row
 * L + 1 of the next table by one narrowing (ctx_L t is a prefix extension of ctx_L), so scoring
 * costs about one narrowing per context length per token and never searches from scratch.
 *
 * The corpus is an ig_src (lm_internal.h): over a difference every count is net, so every method
 * answers as over an index rebuilt without the removed documents.
 */
#include <math.h>
#include <stdlib.h>

#include "lm_internal.h"

#define LM_DEFAULT_CACHE (1 << 18)

/* ------------------------------------------------------------------ handle */

/* An LM over P, or over P minus M (M != NULL, a pair already checked). */
static int lm_new(ig_lm **out, const ig_index *P, const ig_index *M, int64_t max_context, int64_t cache_entries,
                  char *err, size_t errlen) {
    if (!out) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    *out = NULL;
    if (!P) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (ig_index_has_official(P) || (M && ig_index_has_official(M)))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s needs our suffix order, which an official infini-gram index read in place lacks: open it with a sidecar (InfiniGramIndex.open(path, cache_dir=SIDE_DIR), or infinigram-hf prepare PATH --out SIDE_DIR), or convert it (infinigram-hf convert)", "the smoothed InfiniGramLM");
    if (max_context < 0 || max_context > (1 << 20))
        return ig_fail(err, errlen, IG_ERR_ARG, "max_context must be in 0..%d, got %lld", 1 << 20,
                       (long long)max_context);
    if (cache_entries < 0 || cache_entries > (1 << 26)) /* (the table doubles up to it: no overflow) */
        return ig_fail(err, errlen, IG_ERR_ARG, "cache_entries must be in 0..%d, got %lld", 1 << 26,
                       (long long)cache_entries);
    ig_lm *lm = calloc(1, sizeof *lm);
    if (!lm) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    lm->src = ig_src_of(P, M);
    lm->ix = P;
    lm->S = lm->src.ns;
    lm->SP = lm->src.SP;
    lm->w = P->token_width;
    lm->sep = P->separator;
    lm->V = P->vocab_size;
    lm->maxc = max_context;
    size_t rows = (size_t)(max_context + 2) * (size_t)lm->S, slots = (size_t)lm->V + 1;
    lm->shard = calloc((size_t)lm->S, sizeof *lm->shard);
    for (int s = 0; lm->shard && s < lm->S; s++) lm->shard[s] = ig_src_shard(&lm->src, s);
    if (M) {
        lm->cnt_a = calloc(slots, sizeof(int64_t));
        lm->cnt_b = calloc(slots, sizeof(int64_t));
    }
    lm->rows_a = calloc(rows, sizeof(ig_range));
    lm->rows_b = calloc(rows, sizeof(ig_range));
    lm->stamp_a = calloc(slots, sizeof(uint32_t));
    lm->stamp_b = calloc(slots, sizeof(uint32_t));
    lm->dense = calloc(slots, sizeof(double));
    lm->idx = calloc(slots, sizeof(uint32_t));
    lm->cursor = calloc((size_t)lm->S, sizeof(int64_t));
    lm->cursor2 = calloc((size_t)lm->S, sizeof(int64_t));
    lm->child = calloc((size_t)lm->S, sizeof(ig_range));
    lm->child2 = calloc((size_t)lm->S, sizeof(ig_range));
    lm->lv_L = calloc((size_t)max_context + 1, sizeof(int64_t));
    lm->lv_T = calloc((size_t)max_context + 1, sizeof(uint64_t));
    lm->nmemo = calloc((size_t)1 << LM_NMEMO_BITS, sizeof(lm_nmemo));
    if (!lm->nmemo || !lm->rows_a || !lm->rows_b || !lm->stamp_a || !lm->stamp_b || !lm->dense || !lm->idx ||
        !lm->cursor || !lm->cursor2 || !lm->child || !lm->child2 || !lm->lv_L || !lm->lv_T || !lm->shard ||
        (M && (!lm->cnt_a || !lm->cnt_b)) ||
        ig_lm_cache_init(lm, cache_entries ? cache_entries : LM_DEFAULT_CACHE) != IG_OK) {
        ig_lm_free(lm);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    *out = lm;
    return IG_OK;
}

int ig_lm_new(ig_lm **out, const ig_index *ix, int64_t max_context, int64_t cache_entries,
              char *err, size_t errlen) {
    return lm_new(out, ix, NULL, max_context, cache_entries, err, errlen);
}

int ig_diff_lm_new(ig_lm **out, const ig_index *plus, const ig_index *minus, int64_t max_context,
                   int64_t cache_entries, char *err, size_t errlen) {
    if (out) *out = NULL;
    int rc = ig_diff_check_pair(plus, minus, err, errlen);
    return rc ? rc : lm_new(out, plus, minus, max_context, cache_entries, err, errlen);
}

void ig_lm_free(ig_lm *lm) {
    if (!lm) return;
    free(lm->rows_a); free(lm->rows_b); free(lm->stamp_a); free(lm->stamp_b);
    free(lm->dense); free(lm->idx); free(lm->cursor); free(lm->cursor2);
    free(lm->child); free(lm->child2); free(lm->nmemo); free(lm->lv_L); free(lm->lv_T); free(lm->cache);
    free(lm->shard); free(lm->cnt_a); free(lm->cnt_b);
    free(lm);
}

static int check_cfg(ig_lm *lm, const ig_lm_config *c, char *err, size_t errlen) {
    if (!lm) return ig_fail(err, errlen, IG_ERR_ARG, "NULL lm handle");
    lm->src.fail = 0; /* (every call checks its config first: a fresh record of failures) */
    if (!c) return ig_fail(err, errlen, IG_ERR_ARG, "NULL config");
    if (c->method < IG_LM_INFGRAM || c->method > IG_LM_SMOOTH)
        return ig_fail(err, errlen, IG_ERR_ARG, "method: unknown method %d", c->method);
    if (c->max_context < 0 || c->max_context > lm->maxc)
        return ig_fail(err, errlen, IG_ERR_ARG, "max_context must be in 0..%lld (the handle's), got %lld",
                       (long long)lm->maxc, (long long)c->max_context);
    if (!(c->floor >= 0 && c->floor < 1)) return ig_fail(err, errlen, IG_ERR_ARG, "floor must be in [0, 1)");
    /* above 1 the weights decay^i overflow to inf over long contexts (inf / inf = NaN) */
    if (c->method == IG_LM_BACKOFF && !(c->decay > 0 && c->decay <= 1))
        return ig_fail(err, errlen, IG_ERR_ARG, "decay must be in (0, 1], got %g", c->decay);
    if (c->method == IG_LM_SMOOTH) {
        const ig_lm_smooth *m = &c->smooth;
        if (m->max_depth < 0) return ig_fail(err, errlen, IG_ERR_ARG, "max_depth must be >= 0");
        if (!m->witten_bell) {
            if (m->n_params < 1 || !m->d1 || !m->d2 || !m->d3 || !m->theta)
                return ig_fail(err, errlen, IG_ERR_ARG, "smoothing needs n_params >= 1 and d1, d2, d3, theta");
            for (int64_t j = 0; j < m->n_params; j++) {
                if (!(m->d1[j] >= 0 && m->d1[j] <= 1) || !(m->d2[j] >= 0 && m->d2[j] <= 2) ||
                    !(m->d3[j] >= 0 && m->d3[j] <= 3))
                    return ig_fail(err, errlen, IG_ERR_ARG,
                                   "discounts at depth %lld must satisfy 0 <= d1 <= 1, 0 <= d2 <= 2, 0 <= d3 <= 3",
                                   (long long)j);
                if (!(m->theta[j] >= 0 && isfinite(m->theta[j])))
                    return ig_fail(err, errlen, IG_ERR_ARG, "theta at depth %lld must be >= 0", (long long)j);
            }
        }
    }
    return IG_OK;
}

/* The context cap that the method actually reads. */
static int64_t method_cap(const ig_lm_config *c) {
    if (c->method == IG_LM_SMOOTH && c->smooth.max_depth < c->max_context) return c->smooth.max_depth;
    return c->max_context;
}

/* ------------------------------------------------------------------ range tables */

static void row_full(const ig_lm *lm, ig_range *r) { ig_src_full(&lm->src, r); }

/* Rows for the context ctx[0..n) (its last `cap` tokens); returns the depth. */
static int64_t rows_init(ig_lm *lm, ig_range *rows, const uint32_t *ctx, int64_t n, int64_t cap) {
    row_full(lm, rows);
    int64_t top = n < cap ? n : cap, d = 0;
    for (int64_t L = 1; L <= top; L++) {
        if (ig_src_find(&lm->src, ctx + n - L, L, lm_row(lm, rows, L)) == 0) break;
        d = L;
    }
    return d;
}

/* Narrowing that scans small ranges instead of binary-searching them, and memoises large
   ones: the contexts of one or two tokens come back at almost every position. */
static inline ig_range narrow_small(ig_lm *lm, int shard, ig_range r, int64_t d, uint32_t t) {
    const ig_shard *s = lm->shard[shard];
    int w = lm->w;
    if (r.hi - r.lo >= LM_NMEMO_MIN) {
        uint64_t h = ((uint64_t)r.lo * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)t * 0xC2B2AE3D27D4EB4Full) ^
                     ((uint64_t)d << 20) ^ (uint64_t)shard;
        lm_nmemo *e = &lm->nmemo[(h ^ (h >> 29)) & (((uint64_t)1 << LM_NMEMO_BITS) - 1)];
        if (e->hi == r.hi && e->lo == r.lo && e->t == t && e->d == d && e->shard == shard) return e->out;
        ig_range out = ig_narrow1(s, w, r, d, t);
        *e = (lm_nmemo){r.lo, r.hi, d, t, shard, out};
        return out;
    }
    if (r.hi - r.lo > 8) return ig_narrow1(s, w, r, d, t);
    int64_t a = r.lo;
    while (a < r.hi && tok_rank(s, w, a, d) < t) a++;
    int64_t b = a;
    while (b < r.hi && tok_rank(s, w, b, d) == t) b++;
    return (ig_range){a, b};
}

/* next row L + 1 = cur row L narrowed by t (L = 0..min(depth, cap)), next row 0 = all.
   Returns the deepest nonempty row of next: up to cap + 1, so that the count of the deepest
   context followed by t is there; callers clamp the new depth to cap. */
static int64_t rows_push(ig_lm *lm, const ig_range *cur, int64_t depth, ig_range *next, uint32_t t,
                         int64_t cap) {
    row_full(lm, next);
    int64_t top = depth < cap ? depth : cap, nd = 0;
    const int S = lm->S, diff = lm->src.M != NULL;
    for (int64_t L = 0; L <= top; L++) {
        const ig_range *a = cur + L * S;
        ig_range *b = next + (L + 1) * S;
        uint64_t tot = 0;
        for (int s = 0; s < S; s++) {
            if (a[s].hi <= a[s].lo) b[s] = (ig_range){0, 0};
            else if (L == 0) b[s] = ig_first_token_range(lm->shard[s], lm->w, t);
            else b[s] = narrow_small(lm, s, a[s], L, t);
            tot += (uint64_t)(b[s].hi - b[s].lo);
        }
        if (diff) tot = rows_total(lm, b); /* over a difference: the net count */
        if (!tot) break;
        nd = L + 1;
    }
    return nd;
}

static inline uint64_t child_count(ig_lm *lm, ig_range *next, int64_t nd, int64_t L) {
    return L + 1 <= nd ? rows_total(lm, lm_row(lm, next, L + 1)) : 0;
}

/* Exactly one distinct continuation. */
static int is_single(ig_lm *lm, const ig_range *rs, int64_t d, int eod) {
    if (rows_removed(lm, rs)) return ig_lm_single_net(lm, rs, d, eod);
    int have = 0;
    uint32_t t0 = 0;
    for (int s = 0; s < lm->S; s++) {
        int64_t hi = ig_lm_cont_hi(lm, s, rs[s], d, eod);
        if (hi <= rs[s].lo) continue;
        const ig_shard *sh = lm->shard[s];
        uint32_t a = tok_rank(sh, lm->w, rs[s].lo, d), b = tok_rank(sh, lm->w, hi - 1, d);
        if (a != b || (have && a != t0)) return 0;
        have = 1;
        t0 = a;
    }
    return have;
}

/* Without eod, the rows 1..E whose strings end a document (and so have a separator run to
   leave out). A document-final occurrence of ctx_L is one of every shorter suffix too, so they
   are a prefix: usually E = 0 after one check. (Over a difference E may be too deep, which only
   costs a search: a row beyond it has no separator run to leave out.) */
static int64_t sep_depth(const ig_lm *lm, ig_range *rows, int64_t top, int eod) {
    if (eod) return 0;
    int64_t E = 0;
    for (int64_t L = 1; L <= top; L++) {
        const ig_range *rs = lm_row(lm, rows, L);
        int has = 0;
        for (int s = 0; s < lm->S && !has; s++)
            has = rs[s].hi > rs[s].lo && tok_rank(lm->shard[s], lm->w, rs[s].hi - 1, L) == lm->sep;
        if (!has) break;
        E = L;
    }
    return E;
}

/* Continuations of row L, given sep_depth's E. */
static inline uint64_t row_T(ig_lm *lm, ig_range *rows, int64_t L, int64_t E) {
    const ig_range *rs = lm_row(lm, rows, L);
    return L <= E ? ig_lm_cont_total(lm, rs, L, 0) : rows_total(lm, rs);
}

/* Deepest row <= top with a continuation (-1 if none). */
static int64_t deepest(ig_lm *lm, ig_range *rows, int64_t top, int eod) {
    int64_t E = sep_depth(lm, rows, top, eod), L = top;
    while (L >= 0 && row_T(lm, rows, L, E) == 0) L--;
    return L;
}

/* Back-off levels: from the longest suffix with continuations down to length 1, a new level
   each time the number of continuations strictly grows, at most k (k <= 0: all). */
static int64_t backoff_levels(ig_lm *lm, const ig_lm_config *c, ig_range *rows, int64_t depth) {
    int64_t top = depth < c->max_context ? depth : c->max_context, n = 0;
    int64_t E = sep_depth(lm, rows, top, c->eod);
    uint64_t last = 0;
    for (int64_t L = top; L >= 1; L--) {
        uint64_t T = row_T(lm, rows, L, E);
        if (T > last) {
            lm->lv_L[n] = L;
            lm->lv_T[n] = T;
            n++;
            last = T;
            if (c->k > 0 && n >= c->k) break;
        }
    }
    return n;
}

/* ------------------------------------------------------------------ smoothing */

/* B, the number of distinct continuations and those with count 1 / 2 / 3+, at a raw or a
   continuation-count level, end of document included with eod. */
typedef struct {
    uint64_t B, types, n1, n2, n3;
} lm_level_sums;

static lm_level_sums level_sums(const lm_stats *st, int raw, int eod) {
    lm_level_sums r;
    if (raw) r = (lm_level_sums){st->total, st->types, st->r1, st->r2, st->r3};
    else r = (lm_level_sums){st->ctotal, st->types, st->c1, st->c2, st->c3};
    if (eod && st->sep_raw) {
        uint64_t c = raw ? st->sep_raw : st->sep_cont;
        r.B += c;
        r.types++;
        if (c == 1) r.n1++; else if (c == 2) r.n2++; else r.n3++;
    }
    return r;
}

static inline int level_is_raw(const ig_lm_smooth *m, int64_t L) {
    return m->raw_all || (m->raw_top && L == m->max_depth);
}

static inline double discount(const ig_lm_smooth *m, int64_t j, double cnt) {
    return cnt <= 0 ? 0 : cnt == 1 ? m->d1[j] : cnt == 2 ? m->d2[j] : m->d3[j];
}

static double smooth_prob(ig_lm *lm, const ig_lm_config *c, ig_range *cur, int64_t depth,
                          ig_range *next, int64_t nd, int64_t *lmax_out) {
    const ig_lm_smooth *m = &c->smooth;
    int64_t cap = method_cap(c);
    int64_t Lmax = deepest(lm, cur, depth < cap ? depth : cap, c->eod);
    double p = 1.0 / ((double)lm->V + (c->eod ? 1 : 0));
    for (int64_t L = 0; L <= Lmax; L++) {
        int raw = level_is_raw(m, L);
        lm_stats st;
        ig_lm_context_stats(lm, lm_row(lm, cur, L), L, &st);
        lm_level_sums z = level_sums(&st, raw, c->eod);
        if (!z.B) continue;
        double cnt;
        if (raw) cnt = (double)child_count(lm, next, nd, L);
        else cnt = L + 1 <= nd ? (double)ig_lm_nleft(lm, lm_row(lm, next, L + 1), L + 1) : 0;
        if (m->witten_bell) {
            p = (cnt + (double)z.types * p) / ((double)z.B + (double)z.types);
        } else {
            int64_t j = L < m->n_params ? L : m->n_params - 1;
            double gamma = m->theta[j] + m->d1[j] * (double)z.n1 + m->d2[j] * (double)z.n2 +
                           m->d3[j] * (double)z.n3;
            double num = cnt - discount(m, j, cnt);
            p = ((num > 0 ? num : 0) + gamma * p) / ((double)z.B + m->theta[j]);
        }
    }
    *lmax_out = Lmax;
    return p;
}

/* ------------------------------------------------------------------ scoring */

int ig_lm_score(ig_lm *lm, const ig_lm_config *cfg, const uint32_t *ids, int64_t n, double *prob,
                int64_t *suffix_len, uint8_t *sparse, char *err, size_t errlen) {
    int rc = check_cfg(lm, cfg, err, errlen);
    if (!rc) rc = ig_check_ids(lm->ix, ids, n, "score", err, errlen);
    if (rc) return rc;
    if (n > 0 && !prob) return ig_fail(err, errlen, IG_ERR_ARG, "NULL prob");
    int64_t cap = method_cap(cfg), depth = 0;
    ig_range *cur = lm->rows_a, *next = lm->rows_b;
    row_full(lm, cur);
    for (int64_t i = 0; i < n; i++) {
        int64_t nd = rows_push(lm, cur, depth, next, ids[i], cap);
        double p = 0;
        int64_t sl = 0;
        int sp = 0;
        if (cfg->method == IG_LM_INFGRAM) {
            int64_t L = deepest(lm, cur, depth < cap ? depth : cap, cfg->eod);
            if (L >= 0) {
                p = (double)child_count(lm, next, nd, L) / (double)ig_lm_cont_total(lm, lm_row(lm, cur, L), L, cfg->eod);
                sl = L;
                sp = is_single(lm, lm_row(lm, cur, L), L, cfg->eod);
            }
        } else if (cfg->method == IG_LM_BACKOFF) {
            int64_t nl = backoff_levels(lm, cfg, cur, depth);
            double num = 0, den = 0, wgt = 1;
            for (int64_t j = 0; j < nl; j++) {
                num += wgt * (double)child_count(lm, next, nd, lm->lv_L[j]);
                den += wgt * (double)lm->lv_T[j];
                wgt *= cfg->decay;
            }
            if (den > 0) p = num / den;
            if (nl) {
                sl = lm->lv_L[0];
                sp = is_single(lm, lm_row(lm, cur, sl), sl, cfg->eod);
            }
        } else {
            int64_t L;
            p = smooth_prob(lm, cfg, cur, depth, next, nd, &L);
            if (L >= 0) {
                sl = L;
                sp = is_single(lm, lm_row(lm, cur, L), L, cfg->eod);
            }
        }
        if (p < cfg->floor) p = cfg->floor;
        prob[i] = p;
        if (suffix_len) suffix_len[i] = sl;
        if (sparse) sparse[i] = (uint8_t)sp;
        ig_range *t = cur;
        cur = next;
        next = t;
        depth = nd < cap ? nd : cap;
    }
    return ig_src_failed(&lm->src, err, errlen);
}

/* ------------------------------------------------------------------ per-level statistics */

int ig_lm_levels(ig_lm *lm, const uint32_t *ids, int64_t n, int64_t begin, int64_t end,
                 int64_t max_depth, int eod, int with_cont, int64_t *out, int64_t cap,
                 int64_t *rows_out, int64_t *next_pos, char *err, size_t errlen) {
    if (!lm) return ig_fail(err, errlen, IG_ERR_ARG, "NULL lm handle");
    lm->src.fail = 0;
    int rc = ig_check_ids(lm->ix, ids, n, "levels", err, errlen);
    if (rc) return rc;
    if (begin < 0 || end > n || begin > end)
        return ig_fail(err, errlen, IG_ERR_ARG, "positions [%lld, %lld) outside 0..%lld", (long long)begin,
                       (long long)end, (long long)n);
    if (max_depth < 0 || max_depth > lm->maxc)
        return ig_fail(err, errlen, IG_ERR_ARG, "max_depth must be in 0..%lld", (long long)lm->maxc);
    if (!out || !rows_out || !next_pos) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    ig_range *cur = lm->rows_a, *next = lm->rows_b;
    int64_t depth = rows_init(lm, cur, ids, begin, max_depth), rows = 0, i;
    for (i = begin; i < end; i++) {
        int64_t Lmax = deepest(lm, cur, depth, eod);
        if (rows + Lmax + 1 > cap) break;
        int64_t nd = rows_push(lm, cur, depth, next, ids[i], max_depth);
        for (int64_t L = 0; L <= Lmax; L++, rows++) {
            int64_t *r = out + rows * IG_LM_NSTAT;
            ig_range *rs = lm_row(lm, cur, L);
            memset(r, 0, IG_LM_NSTAT * sizeof *r);
            r[0] = i;
            r[1] = L;
            r[2] = (int64_t)ig_lm_cont_total(lm, rs, L, eod);
            r[3] = (int64_t)child_count(lm, next, nd, L);
            if (with_cont) {
                lm_stats st;
                ig_lm_context_stats(lm, rs, L, &st);
                lm_level_sums a = level_sums(&st, 1, eod), b = level_sums(&st, 0, eod);
                r[4] = (int64_t)a.types; r[5] = (int64_t)a.n1; r[6] = (int64_t)a.n2; r[7] = (int64_t)a.n3;
                r[8] = (int64_t)b.B;
                r[9] = L + 1 <= nd ? (int64_t)ig_lm_nleft(lm, lm_row(lm, next, L + 1), L + 1) : 0;
                r[10] = (int64_t)b.types; r[11] = (int64_t)b.n1; r[12] = (int64_t)b.n2; r[13] = (int64_t)b.n3;
            }
        }
        ig_range *t = cur;
        cur = next;
        next = t;
        depth = nd < max_depth ? nd : max_depth;
    }
    *rows_out = rows;
    *next_pos = i;
    return ig_src_failed(&lm->src, err, errlen);
}

/* ------------------------------------------------------------------ distributions */

/* Add weight * (count of each continuation) of row L into dense (slot V = end of document). */
static void add_counts(ig_lm *lm, ig_range *rs, int64_t L, int eod, double weight, double *dense) {
    for (int s = 0; s < lm->S; s++) lm->cursor2[s] = rs[s].lo;
    uint32_t t;
    while (ig_lm_next_follower(lm, rs, L, lm->cursor2, lm->child2, &t)) {
        if (t == lm->sep && !eod) continue;
        dense[lm_slot(lm, t)] += weight * (double)rows_total(lm, lm->child2);
    }
}

/* The method's distribution for the context in rows (depth): V + 1 entries. Reports the depth
   and number of continuations of its longest level. */
static void materialise(ig_lm *lm, const ig_lm_config *c, ig_range *rows, int64_t depth, double *dense,
                        int64_t *sl, uint64_t *matches) {
    size_t slots = (size_t)lm->V + 1;
    memset(dense, 0, slots * sizeof *dense);
    int64_t cap = method_cap(c), top = depth < cap ? depth : cap;
    *sl = 0;
    *matches = 0;
    if (c->method == IG_LM_SMOOTH) {
        const ig_lm_smooth *m = &c->smooth;
        int64_t Lmax = deepest(lm, rows, top, c->eod);
        double vb = (double)lm->V + (c->eod ? 1 : 0), scale = 1; /* dense * scale = p */
        for (size_t i = 0; i < (size_t)lm->V; i++) dense[i] = 1.0 / vb;
        if (c->eod) dense[lm->V] = 1.0 / vb;
        for (int64_t L = 0; L <= Lmax; L++) {
            int raw = level_is_raw(m, L);
            ig_range *rs = lm_row(lm, rows, L);
            lm_stats st;
            ig_lm_context_stats(lm, rs, L, &st);
            lm_level_sums z = level_sums(&st, raw, c->eod);
            if (!z.B) continue;
            int64_t j = L < m->n_params ? L : m->n_params - 1;
            double den, gamma;
            if (m->witten_bell) {
                den = (double)z.B + (double)z.types;
                gamma = (double)z.types / den;
            } else {
                den = (double)z.B + m->theta[j];
                gamma = (m->theta[j] + m->d1[j] * (double)z.n1 + m->d2[j] * (double)z.n2 +
                         m->d3[j] * (double)z.n3) / den;
            }
            scale *= gamma;
            if (scale < 1e-200) { /* fold the scale in before it underflows */
                for (size_t i = 0; i < slots; i++) dense[i] *= scale;
                scale = 1;
            }
            for (int s = 0; s < lm->S; s++) lm->cursor2[s] = rs[s].lo;
            uint32_t t;
            while (ig_lm_next_follower(lm, rs, L, lm->cursor2, lm->child2, &t)) {
                if (t == lm->sep && !c->eod) continue;
                double cnt = raw ? (double)rows_total(lm, lm->child2) : (double)ig_lm_nleft(lm, lm->child2, L + 1);
                double add = m->witten_bell ? cnt : cnt - discount(m, j, cnt);
                if (add > 0) dense[lm_slot(lm, t)] += add / den / scale;
            }
        }
        for (size_t i = 0; i < slots; i++) dense[i] *= scale;
        if (Lmax >= 0) {
            *sl = Lmax;
            *matches = ig_lm_cont_total(lm, lm_row(lm, rows, Lmax), Lmax, c->eod);
        }
        return;
    }
    double den = 0;
    if (c->method == IG_LM_INFGRAM) {
        int64_t L = deepest(lm, rows, top, c->eod);
        if (L >= 0) {
            add_counts(lm, lm_row(lm, rows, L), L, c->eod, 1, dense);
            den = (double)ig_lm_cont_total(lm, lm_row(lm, rows, L), L, c->eod);
            *sl = L;
            *matches = (uint64_t)den;
        }
    } else {
        int64_t nl = backoff_levels(lm, c, rows, depth);
        if (!nl) { /* no context level: the unigram */
            lm->lv_L[0] = 0;
            lm->lv_T[0] = ig_lm_cont_total(lm, rows, 0, c->eod);
            nl = lm->lv_T[0] ? 1 : 0;
        }
        double wgt = 1;
        for (int64_t j = 0; j < nl; j++) {
            add_counts(lm, lm_row(lm, rows, lm->lv_L[j]), lm->lv_L[j], c->eod, wgt, dense);
            den += wgt * (double)lm->lv_T[j];
            wgt *= c->decay;
        }
        if (nl) {
            *sl = lm->lv_L[0];
            *matches = lm->lv_T[0];
        }
    }
    if (den > 0)
        for (size_t i = 0; i < slots; i++) dense[i] /= den;
    else /* an empty index: nothing to count */
        for (size_t i = 0; i < (size_t)lm->V; i++) dense[i] = 1.0 / lm->V;
}

int ig_lm_distribution(ig_lm *lm, const ig_lm_config *cfg, const uint32_t *ctx, int64_t n,
                       double *probs, char *err, size_t errlen) {
    int rc = check_cfg(lm, cfg, err, errlen);
    if (!rc) rc = ig_check_ids(lm->ix, ctx, n, "context", err, errlen);
    if (rc) return rc;
    if (!probs) return ig_fail(err, errlen, IG_ERR_ARG, "NULL probs");
    int64_t depth = rows_init(lm, lm->rows_a, ctx, n, method_cap(cfg)), sl;
    uint64_t m;
    materialise(lm, cfg, lm->rows_a, depth, probs, &sl, &m);
    return ig_src_failed(&lm->src, err, errlen);
}

/* ------------------------------------------------------------------ random numbers */

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman & Vigna). */
static uint64_t rng_next(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* Uniform in [0, n), unbiased (Lemire's multiply-and-reject). */
static uint64_t rng_below(uint64_t *s, uint64_t n) {
    __uint128_t m = (__uint128_t)rng_next(s) * n;
    uint64_t l = (uint64_t)m;
    if (l < n) {
        uint64_t t = (0 - n) % n;
        while (l < t) {
            m = (__uint128_t)rng_next(s) * n;
            l = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* ------------------------------------------------------------------ sampling */

/* Token at a uniform random continuing rank of rows row L: exactly the ∞-gram distribution
   of that context, as the ranks are ordered by next token. (Over a difference, always the net
   rank in token order, whatever the shards: the draw of a one-shard index rebuilt without the
   removed documents.) */
static uint32_t sample_rank(ig_lm *lm, ig_range *rs, int64_t L, uint64_t total, int eod, uint64_t *rng) {
    uint64_t r = rng_below(rng, total);
    if (lm->src.M) return ig_lm_token_at_net(lm, rs, L, eod, r);
    for (int s = 0; s < lm->S; s++) {
        if (rs[s].hi <= rs[s].lo) continue;
        uint64_t cnt = (uint64_t)(ig_lm_cont_hi(lm, s, rs[s], L, eod) - rs[s].lo);
        if (r < cnt) return tok_rank(lm->shard[s], lm->w, rs[s].lo + (int64_t)r, L);
        r -= cnt;
    }
    return lm->sep; /* not reached */
}

static uint32_t sample_plain(ig_lm *lm, const ig_lm_config *c, ig_range *rows, int64_t depth,
                             uint64_t *rng, int64_t *sl, uint64_t *matches) {
    if (c->method == IG_LM_INFGRAM) {
        int64_t top = depth < c->max_context ? depth : c->max_context;
        int64_t L = deepest(lm, rows, top, c->eod);
        if (L < 0) return lm->sep;
        uint64_t T = ig_lm_cont_total(lm, lm_row(lm, rows, L), L, c->eod);
        *sl = L;
        *matches = T;
        return sample_rank(lm, lm_row(lm, rows, L), L, T, c->eod, rng);
    }
    int64_t nl = backoff_levels(lm, c, rows, depth);
    if (!nl) {
        lm->lv_L[0] = 0;
        lm->lv_T[0] = ig_lm_cont_total(lm, rows, 0, c->eod);
        if (!lm->lv_T[0]) return lm->sep;
        nl = 1;
    }
    double total = 0, wgt = 1;
    for (int64_t j = 0; j < nl; j++, wgt *= c->decay) total += wgt * (double)lm->lv_T[j];
    double u = rng_unit(rng) * total;
    int64_t j = 0;
    wgt = 1;
    for (; j < nl - 1; j++, wgt *= c->decay) {
        u -= wgt * (double)lm->lv_T[j];
        if (u < 0) break;
    }
    *sl = lm->lv_L[0];
    *matches = lm->lv_T[0];
    return sample_rank(lm, lm_row(lm, rows, lm->lv_L[j]), lm->lv_L[j], lm->lv_T[j], c->eod, rng);
}

/* Sift-down for a heap of indices ordered by probability (min at the root: the heap sort below
   leaves the array in decreasing order; ties put the smaller id first). */
static inline int before(const double *p, uint32_t a, uint32_t b) { /* a goes after b */
    return p[a] < p[b] || (p[a] == p[b] && a > b);
}
static void sift(uint32_t *h, int64_t n, int64_t i, const double *p) {
    for (;;) {
        int64_t l = 2 * i + 1, m = i;
        if (l < n && before(p, h[l], h[m])) m = l;
        if (l + 1 < n && before(p, h[l + 1], h[m])) m = l + 1;
        if (m == i) return;
        uint32_t t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}
static void sort_desc(uint32_t *h, int64_t n, const double *p) {
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift(h, n, i, p);
    for (int64_t e = n - 1; e > 0; e--) {
        uint32_t t = h[0]; h[0] = h[e]; h[e] = t;
        sift(h, e, 0, p);
    }
}

/* Draw a slot from the dense distribution after greedy / temperature / top-k / top-p.
   Returns V + 1 when it is all zero. */
static uint32_t sample_dense(ig_lm *lm, const ig_lm_sampling *smp, double *p, uint64_t *rng) {
    uint32_t *idx = lm->idx;
    int64_t m = 0;
    for (uint32_t i = 0; i <= lm->V; i++)
        if (p[i] > 0) idx[m++] = i;
    if (!m) return lm->V + 1;
    if (smp->greedy) {
        uint32_t best = idx[0];
        for (int64_t j = 1; j < m; j++)
            if (p[idx[j]] > p[best]) best = idx[j];
        return best;
    }
    if (smp->temperature != 1) {
        double lmax = -INFINITY;
        for (int64_t j = 0; j < m; j++) {
            double l = log(p[idx[j]]);
            if (l > lmax) lmax = l;
        }
        for (int64_t j = 0; j < m; j++) p[idx[j]] = exp((log(p[idx[j]]) - lmax) / smp->temperature);
    }
    int64_t keep = m;
    if ((smp->top_k > 0 && smp->top_k < m) || smp->top_p < 1) {
        sort_desc(idx, m, p);
        if (smp->top_k > 0 && smp->top_k < keep) keep = smp->top_k;
        if (smp->top_p < 1) {
            double total = 0, acc = 0;
            for (int64_t j = 0; j < keep; j++) total += p[idx[j]];
            int64_t j = 0;
            while (j < keep) {
                acc += p[idx[j++]];
                if (acc >= smp->top_p * total) break;
            }
            keep = j;
        }
    }
    double total = 0;
    for (int64_t j = 0; j < keep; j++) total += p[idx[j]];
    double u = rng_unit(rng) * total;
    for (int64_t j = 0; j < keep - 1; j++) {
        u -= p[idx[j]];
        if (u < 0) return idx[j];
    }
    return idx[keep - 1];
}

int ig_lm_generate(ig_lm *lm, const ig_lm_config *cfg, const ig_lm_sampling *smp, const uint32_t *ctx,
                   int64_t n_ctx, int64_t max_new, uint64_t *rng, const uint32_t *stop_ids, int64_t n_stop,
                   uint32_t *out, int64_t *suffix_len, uint64_t *matches, int64_t *n_out, int *ended,
                   char *err, size_t errlen) {
    int rc = check_cfg(lm, cfg, err, errlen);
    if (!rc) rc = ig_check_ids(lm->ix, ctx, n_ctx, "context", err, errlen);
    if (rc) return rc;
    if (!smp || !rng || !n_out || !ended || (max_new > 0 && !out))
        return ig_fail(err, errlen, IG_ERR_ARG, "NULL argument");
    if (max_new < 0) return ig_fail(err, errlen, IG_ERR_ARG, "max_new must be >= 0");
    if (n_stop > 0 && !stop_ids) return ig_fail(err, errlen, IG_ERR_ARG, "NULL stop_ids");
    if (!smp->greedy && !(smp->temperature > 0 && isfinite(smp->temperature)))
        return ig_fail(err, errlen, IG_ERR_ARG, "temperature must be positive (use greedy for 0)");
    if (smp->top_k < 0) return ig_fail(err, errlen, IG_ERR_ARG, "top_k must be >= 0");
    if (!(smp->top_p > 0)) return ig_fail(err, errlen, IG_ERR_ARG, "top_p must be in (0, 1]");
    if (!(rng[0] | rng[1] | rng[2] | rng[3])) return ig_fail(err, errlen, IG_ERR_ARG, "rng state must not be all zero");
    int plain = !smp->greedy && smp->temperature == 1 && smp->top_k == 0 && smp->top_p >= 1 &&
                cfg->method != IG_LM_SMOOTH;
    int64_t cap = method_cap(cfg);
    ig_range *cur = lm->rows_a, *next = lm->rows_b;
    int64_t depth = rows_init(lm, cur, ctx, n_ctx, cap), count = 0;
    *ended = 0;
    while (count < max_new) {
        int64_t sl = 0;
        uint64_t m = 0;
        uint32_t t;
        if (plain) {
            t = sample_plain(lm, cfg, cur, depth, rng, &sl, &m);
        } else {
            materialise(lm, cfg, cur, depth, lm->dense, &sl, &m);
            uint32_t slot = sample_dense(lm, smp, lm->dense, rng);
            t = slot >= lm->V ? lm->sep : slot;
        }
        if (t >= lm->V) { /* the separator (or an id a corrupt tokens.bin holds: never emitted) */
            *ended = 1;
            break;
        }
        out[count] = t;
        if (suffix_len) suffix_len[count] = sl;
        if (matches) matches[count] = m;
        count++;
        int64_t nd = rows_push(lm, cur, depth, next, t, cap);
        ig_range *tmp = cur;
        cur = next;
        next = tmp;
        depth = nd < cap ? nd : cap;
        int stop = 0;
        for (int64_t j = 0; j < n_stop && !stop; j++) stop = stop_ids[j] == t;
        if (stop) {
            *ended = 2;
            break;
        }
    }
    *n_out = count;
    return ig_src_failed(&lm->src, err, errlen);
}
