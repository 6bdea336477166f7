/* lm_stats.c - what smoothing needs to know about a context string s: its continuations, their
 * raw counts and their Kneser-Ney continuation counts N1+(. s w), counted exactly over the
 * occurrences of s (the suffix-array range of s is ordered by the next token, so the occurrences
 * of s w are one run of it; the token left of each occurrence is read from the token array).
 * Over a difference the removed index's occurrences are subtracted: counts are net, and a left
 * token counts while its net occurrences are positive (lm_tally). Large strings are cached per
 * handle.
 */
#include <stdlib.h>

#include "lm_internal.h"

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
    int any = 0;
    uint32_t best = 0;
    for (int s = 0; s < lm->S; s++) {
        if (cursor[s] >= rs[s].hi) continue;
        uint32_t t = tok_rank(lm->shard[s], lm->w, cursor[s], d);
        if (!any || t < best) best = t;
        any = 1;
    }
    if (!any) return 0;
    for (int s = 0; s < lm->S; s++) {
        const ig_shard *sh = lm->shard[s];
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
    const ig_shard *sh = lm->shard[s];
    if (tok_rank(sh, lm->w, r.hi - 1, d) != lm->sep) return r.hi;
    int64_t a = r.lo, b = r.hi - 1; /* b holds the separator: find where its run starts */
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (tok_rank(sh, lm->w, mid, d) == lm->sep) b = mid; else a = mid + 1;
    }
    return a;
}

uint64_t ig_lm_cont_total(ig_lm *lm, const ig_range *rs, int64_t d, int eod) {
    uint64_t t = 0;
    for (int s = 0; s < lm->SP; s++)
        if (rs[s].hi > rs[s].lo) t += (uint64_t)(ig_lm_cont_hi(lm, s, rs[s], d, eod) - rs[s].lo);
    if (lm->S == lm->SP) return t;
    int64_t net = (int64_t)t; /* over a difference: the removed index's subtract */
    for (int s = lm->SP; s < lm->S; s++)
        if (rs[s].hi > rs[s].lo) net -= ig_lm_cont_hi(lm, s, rs[s], d, eod) - rs[s].lo;
    if (net < 0) {
        lm->src.fail = IG_ERR_ARG;
        return 0;
    }
    return (uint64_t)net;
}

/* ------------------------------------------------------------------ N1+(. s) */

static inline uint32_t left_slot(const ig_lm *lm, const ig_shard *sh, int64_t r) {
    return lm_slot(lm, ig_tok(sh, lm->w, ig_sa(sh, r) - 1));
}

/* Tally the left tokens of the occurrences in rs: the index's shards add, the removed index's
   (after them: a count below zero means M is not a subset) subtract. */
static void tally_ranges(ig_lm *lm, lm_tally *t, const ig_range *rs) {
    for (int s = 0; s < lm->S; s++) {
        const ig_shard *sh = lm->shard[s];
        int sign = s < lm->SP ? 1 : -1;
        if (t->cnt)
            for (int64_t r = rs[s].lo; r < rs[s].hi; r++) tally_add(t, left_slot(lm, sh, r), sign);
        else /* (over an index: the stamps alone, the loop kept as tight as it was) */
            for (int64_t r = rs[s].lo; r < rs[s].hi; r++) tally_mark(t, left_slot(lm, sh, r));
    }
}

static uint64_t scan_nleft(ig_lm *lm, const ig_range *rs) {
    lm_tally t = {lm->stamp_a, lm->cnt_a, lm_next_gen(lm->stamp_a, &lm->gen_a, lm->V + 1), 0, 0};
    tally_ranges(lm, &t, rs);
    if (t.neg) lm->src.fail = IG_ERR_ARG;
    return t.n;
}

uint64_t ig_lm_nleft(ig_lm *lm, const ig_range *rs, int64_t d) {
    uint64_t tot = rows_total(lm, rs);
    if (tot <= 1) return tot;
    if (rows_gross(lm, rs, tot) <= LM_TINY) return scan_nleft(lm, rs);
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
    /* all occurrences of s (N1+(. s)), and those of each s w in turn */
    lm_tally all = {lm->stamp_b, lm->cnt_b, lm_next_gen(lm->stamp_b, &lm->gen_b, lm->V + 1), 0, 0};
    for (int s = 0; s < lm->S; s++) lm->cursor[s] = rs[s].lo;
    uint32_t t;
    while (ig_lm_next_follower(lm, rs, d, lm->cursor, lm->child, &t)) {
        lm_tally one = {lm->stamp_a, lm->cnt_a, lm_next_gen(lm->stamp_a, &lm->gen_a, lm->V + 1), 0, 0};
        int64_t net = 0, gross = 0;
        for (int s = 0; s < lm->S; s++) {
            const ig_shard *sh = lm->shard[s];
            ig_range c = lm->child[s];
            if (one.cnt) {
                int sign = s < lm->SP ? 1 : -1;
                for (int64_t r = c.lo; r < c.hi; r++) {
                    uint32_t left = left_slot(lm, sh, r);
                    tally_add(&one, left, sign);
                    tally_add(&all, left, sign);
                }
                net += sign * (c.hi - c.lo);
                gross += c.hi - c.lo;
            } else { /* over an index: the stamps alone (smoothing's hottest loop, kept as it was) */
                for (int64_t r = c.lo; r < c.hi; r++) {
                    uint32_t left = left_slot(lm, sh, r);
                    tally_mark(&one, left);
                    tally_mark(&all, left);
                }
                net += c.hi - c.lo;
            }
        }
        if (!one.cnt) gross = net;
        if (net < 0 || one.neg) lm->src.fail = IG_ERR_ARG;
        if (net <= 0) continue; /* every occurrence removed: not a continuation */
        uint64_t raw = (uint64_t)net, nl = one.n;
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
        if (cache_children && gross > LM_TINY) { /* asked for next, when ids[i] == t */
            int32_t shard = 0;
            int64_t lo = 0;
            key_of(lm, lm->child, &shard, &lo);
            lm_centry *e = cache_slot(lm, d + 1, shard, lo, 1);
            e->st.nleft = nl;
            e->flags |= LM_HAVE_NLEFT;
        }
    }
    st->nleft = all.n;
    if (all.neg) lm->src.fail = IG_ERR_ARG;
}

void ig_lm_context_stats(ig_lm *lm, const ig_range *rs, int64_t d, lm_stats *out) {
    uint64_t net = rows_total(lm, rs);
    int64_t tot = rows_gross(lm, rs, net);
    if (tot == 1 && net == 1) { /* one occurrence: one continuation, or the end of its document */
        memset(out, 0, sizeof *out);
        out->nleft = 1;
        for (int s = 0; s < lm->S; s++)
            if (rs[s].hi > rs[s].lo) {
                if (tok_rank(lm->shard[s], lm->w, rs[s].lo, d) == lm->sep) {
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
