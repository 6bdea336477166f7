/* lm_stats.c - what smoothing needs to know about a context string s: its continuations, their
 * raw counts and their Kneser-Ney continuation counts N1+(. s w), counted exactly over the
 * occurrences of s (the suffix-array range of s is ordered by the next token, so the occurrences
 * of s w are one run of it; the token left of each occurrence is read from the token array).
 * Large strings are cached per handle. Also: index-wide count-of-counts for discount estimates.
 */
#include <stdlib.h>

#include "lm_internal.h"

/* ------------------------------------------------------------------ stamps */

/* A fresh stamp value: marks "seen in this group" without clearing the array per group. */
static uint32_t next_gen(uint32_t *stamp, uint32_t *gen, uint32_t n) {
    if (++*gen == 0) {
        memset(stamp, 0, (size_t)n * sizeof *stamp);
        *gen = 1;
    }
    return *gen;
}

/* ------------------------------------------------------------------ cache */

/* The table starts small and doubles as it fills, up to the largest power of two >= entries:
   memory follows what a handle actually caches, not the cap it was given. */
int ig_lm_cache_init(ig_lm *lm, int64_t entries) {
    int64_t max = 1024, first = 4096;
    while (max < entries) max <<= 1;
    if (first > max) first = max;
    lm->cache_max = max;
    lm->cache = malloc((size_t)first * sizeof *lm->cache);
    if (!lm->cache) return IG_ERR_NOMEM;
    lm->cache_cap = first;
    ig_lm_clear_cache(lm);
    return IG_OK;
}

/* Double an emptied-when-full table while below its cap (entries are dropped, as when it is
   emptied: they are cheap to recompute); stays as it is when memory runs out. */
static void cache_grow(ig_lm *lm) {
    if (lm->cache_cap >= lm->cache_max) return;
    lm_centry *bigger = malloc((size_t)(2 * lm->cache_cap) * sizeof *bigger);
    if (!bigger) return;
    free(lm->cache);
    lm->cache = bigger;
    lm->cache_cap *= 2;
}

void ig_lm_clear_cache(ig_lm *lm) {
    if (!lm || !lm->cache) return;
    for (int64_t i = 0; i < lm->cache_cap; i++) lm->cache[i].depth = -1;
    lm->cache_used = 0;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A string of length d is identified by its range in the first shard where it occurs. */
static int key_of(const ig_lm *lm, const ig_range *rs, int32_t *shard, int64_t *lo) {
    for (int s = 0; s < lm->S; s++)
        if (rs[s].hi > rs[s].lo) {
            *shard = s;
            *lo = rs[s].lo;
            return 1;
        }
    return 0;
}

/* The entry of (d, shard, lo), or NULL; with `create`, a new one (the cache is emptied, and
   grown while below its cap, when 60% full: entries are cheap to recompute, and nothing holds
   pointers into it). */
static lm_centry *cache_slot(ig_lm *lm, int64_t d, int32_t shard, int64_t lo, int create) {
    uint64_t mask = (uint64_t)lm->cache_cap - 1;
    uint64_t h = mix64((uint64_t)lo * 0x9E3779B97F4A7C15ull ^ ((uint64_t)d << 40) ^ (uint64_t)shard);
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        lm_centry *e = &lm->cache[i];
        if (e->depth < 0) {
            if (!create) return NULL;
            if (lm->cache_used * 10 >= lm->cache_cap * 6) {
                cache_grow(lm);
                ig_lm_clear_cache(lm);
                return cache_slot(lm, d, shard, lo, 1);
            }
            e->depth = (int32_t)d;
            e->shard = shard;
            e->lo = lo;
            e->flags = 0;
            lm->cache_used++;
            return e;
        }
        if (e->depth == d && e->shard == shard && e->lo == lo) return e;
    }
}

/* ------------------------------------------------------------------ walking continuations */

static int64_t run_end(const ig_shard *s, int w, int64_t i, int64_t hi, int64_t d, uint32_t t) {
    int64_t step = 1, last = i;
    while (i + step < hi && tok_rank(s, w, i + step, d) == t) {
        last = i + step;
        step <<= 1;
    }
    int64_t a = last + 1, b = i + step < hi ? i + step : hi;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (tok_rank(s, w, mid, d) == t) a = mid + 1; else b = mid;
    }
    return a;
}

int ig_lm_next_follower(const ig_lm *lm, const ig_range *rs, int64_t d, int64_t *cursor,
                     ig_range *child, uint32_t *tok) {
    const ig_index *ix = lm->ix;
    int any = 0;
    uint32_t best = 0;
    for (int s = 0; s < lm->S; s++) {
        if (cursor[s] >= rs[s].hi) continue;
        uint32_t t = tok_rank(&ix->shards[s], lm->w, cursor[s], d);
        if (!any || t < best) best = t;
        any = 1;
    }
    if (!any) return 0;
    for (int s = 0; s < lm->S; s++) {
        const ig_shard *sh = &ix->shards[s];
        if (cursor[s] < rs[s].hi && tok_rank(sh, lm->w, cursor[s], d) == best) {
            int64_t e = run_end(sh, lm->w, cursor[s], rs[s].hi, d, best);
            child[s] = (ig_range){cursor[s], e};
            cursor[s] = e;
        } else {
            child[s] = (ig_range){0, 0};
        }
    }
    *tok = best;
    return 1;
}

int64_t ig_lm_cont_hi(const ig_lm *lm, int s, ig_range r, int64_t d, int eod) {
    if (eod || d == 0 || r.hi <= r.lo) return r.hi;
    const ig_shard *sh = &lm->ix->shards[s];
    if (tok_rank(sh, lm->w, r.hi - 1, d) != lm->sep) return r.hi;
    int64_t a = r.lo, b = r.hi - 1; /* b holds the separator: find where its run starts */
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (tok_rank(sh, lm->w, mid, d) == lm->sep) b = mid; else a = mid + 1;
    }
    return a;
}

uint64_t ig_lm_cont_total(const ig_lm *lm, const ig_range *rs, int64_t d, int eod) {
    uint64_t t = 0;
    for (int s = 0; s < lm->S; s++)
        if (rs[s].hi > rs[s].lo) t += (uint64_t)(ig_lm_cont_hi(lm, s, rs[s], d, eod) - rs[s].lo);
    return t;
}

/* ------------------------------------------------------------------ N1+(. s) */

static inline uint32_t left_slot(const ig_lm *lm, const ig_shard *sh, int64_t r) {
    return lm_slot(lm, ig_tok(sh, lm->w, ig_sa(sh, r) - 1));
}

static uint64_t scan_nleft(ig_lm *lm, const ig_range *rs) {
    uint32_t g = next_gen(lm->stamp_a, &lm->gen_a, lm->V + 1);
    uint64_t n = 0;
    for (int s = 0; s < lm->S; s++) {
        const ig_shard *sh = &lm->ix->shards[s];
        for (int64_t r = rs[s].lo; r < rs[s].hi; r++) {
            uint32_t left = left_slot(lm, sh, r);
            if (lm->stamp_a[left] != g) {
                lm->stamp_a[left] = g;
                n++;
            }
        }
    }
    return n;
}

uint64_t ig_lm_nleft(ig_lm *lm, const ig_range *rs, int64_t d) {
    uint64_t tot = rows_total(lm, rs);
    if (tot <= 1) return tot;
    if (tot <= LM_TINY) return scan_nleft(lm, rs);
    int32_t shard = 0;
    int64_t lo = 0;
    key_of(lm, rs, &shard, &lo);
    lm_centry *e = cache_slot(lm, d, shard, lo, 0);
    if (e && (e->flags & LM_HAVE_NLEFT)) return e->st.nleft;
    uint64_t n = scan_nleft(lm, rs);
    e = cache_slot(lm, d, shard, lo, 1);
    e->st.nleft = n;
    e->flags |= LM_HAVE_NLEFT;
    return n;
}

/* ------------------------------------------------------------------ context statistics */

static void compute_stats(ig_lm *lm, const ig_range *rs, int64_t d, lm_stats *st, int cache_children) {
    memset(st, 0, sizeof *st);
    uint32_t gb = next_gen(lm->stamp_b, &lm->gen_b, lm->V + 1);
    for (int s = 0; s < lm->S; s++) lm->cursor[s] = rs[s].lo;
    uint32_t t;
    while (ig_lm_next_follower(lm, rs, d, lm->cursor, lm->child, &t)) {
        uint32_t ga = next_gen(lm->stamp_a, &lm->gen_a, lm->V + 1);
        uint64_t raw = 0, nl = 0;
        for (int s = 0; s < lm->S; s++) {
            const ig_shard *sh = &lm->ix->shards[s];
            ig_range c = lm->child[s];
            for (int64_t r = c.lo; r < c.hi; r++) {
                uint32_t left = left_slot(lm, sh, r);
                if (lm->stamp_a[left] != ga) {
                    lm->stamp_a[left] = ga;
                    nl++;
                }
                if (lm->stamp_b[left] != gb) {
                    lm->stamp_b[left] = gb;
                    st->nleft++;
                }
            }
            raw += (uint64_t)(c.hi - c.lo);
        }
        if (t == lm->sep) {
            st->sep_raw = raw;
            st->sep_cont = nl;
            continue;
        }
        st->total += raw;
        st->types++;
        if (raw == 1) st->r1++; else if (raw == 2) st->r2++; else st->r3++;
        st->ctotal += nl;
        if (nl == 1) st->c1++; else if (nl == 2) st->c2++; else st->c3++;
        if (cache_children && raw > LM_TINY) { /* asked for next, when ids[i] == t */
            int32_t shard = 0;
            int64_t lo = 0;
            key_of(lm, lm->child, &shard, &lo);
            lm_centry *e = cache_slot(lm, d + 1, shard, lo, 1);
            e->st.nleft = nl;
            e->flags |= LM_HAVE_NLEFT;
        }
    }
}

void ig_lm_context_stats(ig_lm *lm, const ig_range *rs, int64_t d, lm_stats *out) {
    uint64_t tot = rows_total(lm, rs);
    if (tot == 1) { /* one occurrence: one continuation, or the end of its document */
        memset(out, 0, sizeof *out);
        out->nleft = 1;
        for (int s = 0; s < lm->S; s++)
            if (rs[s].hi > rs[s].lo) {
                if (tok_rank(&lm->ix->shards[s], lm->w, rs[s].lo, d) == lm->sep) {
                    out->sep_raw = out->sep_cont = 1;
                } else {
                    out->total = out->ctotal = 1;
                    out->types = out->r1 = out->c1 = 1;
                }
            }
        return;
    }
    if (tot <= LM_TINY) {
        compute_stats(lm, rs, d, out, 0);
        return;
    }
    int32_t shard = 0;
    int64_t lo = 0;
    key_of(lm, rs, &shard, &lo);
    lm_centry *e = cache_slot(lm, d, shard, lo, 0);
    if (e && (e->flags & LM_HAVE_STATS)) {
        *out = e->st;
        return;
    }
    compute_stats(lm, rs, d, out, 1);
    e = cache_slot(lm, d, shard, lo, 1);
    e->st = *out;
    e->flags |= LM_HAVE_STATS | LM_HAVE_NLEFT;
}

/* ------------------------------------------------------------------ count-of-counts */

/* Order of two suffixes by their first max_n tokens (the separator, the largest id, ends one). */
static int cmp_prefix(const ig_index *ix, int s1, int64_t p1, int s2, int64_t p2, int64_t max_n) {
    int w = ix->token_width;
    uint32_t sep = ix->separator;
    for (int64_t k = 0; k < max_n; k++) {
        uint32_t a = ig_tok(&ix->shards[s1], w, p1 + k), b = ig_tok(&ix->shards[s2], w, p2 + k);
        if (a != b) return a < b ? -1 : 1;
        if (a == sep) return 0;
    }
    return 0;
}

int ig_lm_count_of_counts(const ig_index *ix, int64_t max_n, int64_t kmax, uint64_t *raw,
                          uint64_t *cont, uint64_t *types, char *err, size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (ig_index_has_official(ix))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s needs our suffix order, which an official infini-gram index read in place lacks: open it with a sidecar (InfiniGramIndex.open(path, cache_dir=SIDE_DIR), or infinigram-hf prepare PATH --out SIDE_DIR), or convert it (infinigram-hf convert)", "count-of-counts");
    if (max_n < 1 || max_n > 4096) return ig_fail(err, errlen, IG_ERR_ARG, "max_n must be in 1..4096, got %lld", (long long)max_n);
    if (kmax < 1) return ig_fail(err, errlen, IG_ERR_ARG, "kmax must be positive, got %lld", (long long)kmax);
    if (!raw || !cont) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    uint64_t slots = (uint64_t)ix->vocab_size + 1;
    if (slots * (uint64_t)max_n > ((uint64_t)1 << 31))
        return ig_fail(err, errlen, IG_ERR_LIMIT, "vocab_size * max_n too large for count-of-counts");
    memset(raw, 0, (size_t)(max_n * kmax) * sizeof *raw);
    memset(cont, 0, (size_t)(max_n * kmax) * sizeof *cont);
    if (types) memset(types, 0, (size_t)max_n * sizeof *types);
    int S = ix->n_shards, w = ix->token_width;
    uint32_t sep = ix->separator;
    uint32_t *stamp = calloc((size_t)(slots * (uint64_t)max_n), sizeof *stamp);
    int64_t *size = calloc((size_t)max_n, sizeof *size), *dl = calloc((size_t)max_n, sizeof *dl);
    uint32_t *gen = calloc((size_t)max_n, sizeof *gen);
    int64_t *cur = calloc((size_t)S, sizeof *cur);
    if (!stamp || !size || !dl || !gen || !cur) {
        free(stamp); free(size); free(dl); free(gen); free(cur);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    int prev_s = -1;
    int64_t prev_p = 0, prev_avail = 0, open_max = 0;
#define FLUSH(j)                                                            \
    do {                                                                    \
        if (size[j] > 0) {                                                  \
            if (types) types[j]++;                                          \
            if (size[j] <= kmax) raw[(j) * kmax + size[j] - 1]++;           \
            if (dl[j] <= kmax) cont[(j) * kmax + dl[j] - 1]++;              \
        }                                                                   \
        size[j] = 0;                                                        \
        dl[j] = 0;                                                          \
    } while (0)
    for (;;) {
        /* the next suffix in the merged order */
        int bs = -1;
        for (int s = 0; s < S; s++) {
            if (cur[s] >= ix->shards[s].num_tokens) continue;
            if (bs < 0 || cmp_prefix(ix, s, ig_sa(&ix->shards[s], cur[s]), bs,
                                     ig_sa(&ix->shards[bs], cur[bs]), max_n) < 0)
                bs = s;
        }
        if (bs < 0) break;
        const ig_shard *sh = &ix->shards[bs];
        int64_t p = ig_sa(sh, cur[bs]++);
        int64_t avail = 0;
        while (avail < max_n && ig_tok(sh, w, p + avail) != sep) avail++;
        int64_t lcp = 0;
        if (prev_s >= 0) {
            const ig_shard *ps = &ix->shards[prev_s];
            int64_t lim = avail < prev_avail ? avail : prev_avail;
            while (lcp < lim && ig_tok(sh, w, p + lcp) == ig_tok(ps, w, prev_p + lcp)) lcp++;
        }
        for (int64_t j = lcp; j < open_max; j++) FLUSH(j); /* n-grams longer than lcp end */
        uint32_t left = ig_tok(sh, w, p - 1);
        left = left >= ix->vocab_size ? ix->vocab_size : left; /* the separator (or a corrupt id) */
        for (int64_t j = 0; j < avail; j++) {
            if (size[j] == 0) /* a new n-gram: a fresh stamp for its depth */
                next_gen(stamp + (size_t)j * slots, &gen[j], (uint32_t)slots);
            size[j]++;
            uint32_t *st = stamp + (size_t)j * slots + left;
            if (*st != gen[j]) {
                *st = gen[j];
                dl[j]++;
            }
        }
        open_max = avail;
        prev_s = bs;
        prev_p = p;
        prev_avail = avail;
    }
    for (int64_t j = 0; j < open_max; j++) FLUSH(j);
#undef FLUSH
    free(stamp); free(size); free(dl); free(gen); free(cur);
    return IG_OK;
}
