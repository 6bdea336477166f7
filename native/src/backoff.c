/* backoff.c - the state machine's back-off in time linear in the query (see backoff.h). */
#include <stdint.h>
#include <stdlib.h>

#include "backoff.h"

/* ---------------------------------------------------------------- LCE between text positions */

/* A stretch of one diagonal: text_a[u + d] == text_b[u] for every u in [u0, u1); with closed,
   they differ at u1. */
typedef struct {
    const ig_shard *a, *b;
    int64_t d, u0, u1;
    uint32_t used; /* clock of the last use (least recently used is replaced) */
    int closed;
} lce_entry;

/* Set-associative: a diagonal may hold several long stretches (a periodic stretch of corpus
   broken by a defect); a collision only forgets. */
#define IG_LCE_SETS 1024 /* a power of two */
#define IG_LCE_WAYS 4

/* A periodic stretch of one shard's text: text[x] == text[x + period] for x in [start, end - period);
   with closed, not at end - period. Two positions of the stretch a multiple of the period apart
   agree up to its end, whatever their distance: a run or a periodic stretch is compared once, not
   once per pair of positions (the probes of one binary search all lie on different diagonals). */
typedef struct {
    const ig_shard *s;
    int64_t start, end, period;
    uint32_t used;
    int closed;
} lce_period;

#define IG_LCE_PERIODS 16
#define IG_LCE_PERIOD_MIN 32 /* stretches shorter than this are cheap to compare anyway */

struct ig_lce_memo {
    lce_entry e[IG_LCE_SETS][IG_LCE_WAYS];
    lce_period p[IG_LCE_PERIODS];
    uint32_t clock;
};

void ig_lce_memo_free(ig_lce_memo *m) { free(m); }

#ifdef IG_BACKOFF_STATS
long long ig_st_lce, ig_st_naive, ig_st_pred, ig_st_long;
#define STAT(x) (x)++
#else
#define STAT(x) ((void)0)
#endif

static size_t lce_set(const ig_shard *a, const ig_shard *b, int64_t d) {
    uint64_t h = (uint64_t)d * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uintptr_t)a * 0xC2B2AE3D27D4EB4Full + (uint64_t)(uintptr_t)b;
    h ^= h >> 29;
    return (size_t)(h & (IG_LCE_SETS - 1));
}

/* Length of the longest common prefix of text_a[y..] and text_b[u..], at most cap. A result
   below cap is a real mismatch: the tokens at y + result and u + result differ. Every token
   compared extends a remembered stretch of the diagonal, and a comparison that runs into a
   remembered stretch jumps over it, so a stretch of text is compared at most once per diagonal
   (while it stays in the memo). */
static int64_t lce_diagonal(ig_lce_memo *m, int w, const ig_shard *a, int64_t y, const ig_shard *b, int64_t u,
                            int64_t cap) {
    if (cap <= 0) return 0;
    int64_t d = y - u, k = 0, start = u;
    lce_entry *set = m ? m->e[lce_set(a, b, d)] : NULL, *target = NULL, *ahead = NULL;
    for (int i = 0; set && i < IG_LCE_WAYS; i++) {
        lce_entry *x = &set[i];
        if (x->a != a || x->b != b || x->d != d) continue;
        if (x->u0 <= u && u <= x->u1) { target = x; break; }            /* u lies in this stretch */
        if (x->u0 > u && (!ahead || x->u0 < ahead->u0)) ahead = x;      /* the next one to the right */
    }
    int closed = 0;
    if (target) {
        target->used = ++m->clock;
        k = target->u1 - u;
        if (k >= cap) return cap;
        if (target->closed) return k;
        start = target->u0; /* continue past its open end */
        ahead = NULL;
    }
    while (k < cap) {
        if (ahead && u + k == ahead->u0) { /* ran into a remembered stretch: jump over it */
            k = ahead->u1 - u;
            closed = ahead->closed;
            target = ahead;
            ahead = NULL;
            if (closed || k >= cap) break;
            continue;
        }
        STAT(ig_st_naive);
        if (ig_tok(a, w, y + k) != ig_tok(b, w, u + k)) {
            closed = 1;
            break;
        }
        k++;
    }
    if (set) {
        if (!target) { /* a new stretch replaces the least recently used way */
            target = &set[0];
            for (int i = 1; i < IG_LCE_WAYS; i++)
                if (set[i].used < target->used) target = &set[i];
        }
        *target = (lce_entry){a, b, d, start, u + k, ++m->clock, closed};
    }
    return k < cap ? k : cap;
}

/* The smallest period of a stretch text[lo ..) known to have period dist and at least 2 * dist
   long: that of its first 2 * dist tokens (a prefix function), which divides dist by the
   Fine-Wilf lemma and is then a period of the whole stretch. O(dist), as the comparisons that
   found the stretch; dist itself when the scratch cannot be had (or dist is over 2^20). */
static int64_t smallest_period(const ig_shard *s, int w, int64_t lo, int64_t dist) {
    if (dist <= 1 || dist > (1 << 20)) return dist;
    int64_t n = 2 * dist;
    int32_t *pi = malloc((size_t)n * sizeof *pi);
    if (!pi) return dist;
    pi[0] = 0;
    for (int64_t i = 1; i < n; i++) {
        int32_t k = pi[i - 1];
        uint32_t c = ig_tok(s, w, lo + i);
        while (k > 0 && ig_tok(s, w, lo + k) != c) k = pi[k - 1];
        pi[i] = k + (ig_tok(s, w, lo + k) == c);
    }
    int64_t p = n - pi[n - 1];
    free(pi);
    return p <= dist && dist % p == 0 ? p : dist;
}

/* LCE of text_a[y..] and text_b[u..] (as lce_diagonal), first through the periodic stretches. */
static int64_t lce(ig_lce_memo *m, int w, const ig_shard *a, int64_t y, const ig_shard *b, int64_t u,
                   int64_t cap) {
    if (cap <= 0) return 0;
    STAT(ig_st_lce);
    if (a == b && y == u) return cap;
    if (!m || a != b) return lce_diagonal(m, w, a, y, b, u, cap);
    int64_t lo = y < u ? y : u, hi = y < u ? u : y, dist = hi - lo;
    for (int i = 0; i < IG_LCE_PERIODS; i++) {
        lce_period *p = &m->p[i];
        if (p->s != a || dist % p->period || lo < p->start || hi > p->end) continue;
        p->used = ++m->clock;
        int64_t k = p->end - hi; /* both positions agree up to the stretch's end */
        if (k >= cap) return cap;
        if (p->closed) return k;
        return k + lce_diagonal(m, w, a, y + k, b, u + k, cap - k);
    }
    int64_t h = lce_diagonal(m, w, a, y, b, u, cap);
    if (h >= dist && h >= IG_LCE_PERIOD_MIN) { /* text[lo .. hi + h) has period dist */
        lce_period *p = &m->p[0];
        for (int i = 1; i < IG_LCE_PERIODS; i++)
            if (m->p[i].used < p->used) p = &m->p[i];
        *p = (lce_period){a, lo, hi + h, smallest_period(a, w, lo, dist), ++m->clock, h < cap};
    }
    return h;
}

/* ---------------------------------------------------------------- search by a text pattern */

/* The pattern: text_b[u .. u + m) then the token t (m >= 1). */
typedef struct {
    ig_lce_memo *memo;
    int w;
    const ig_shard *b;
    int64_t u, m;
    uint32_t t;
} pattern;

/* Compare the suffix at text_a[y..] with the pattern, both known to agree on their first k0
   tokens: the sign of (suffix - pattern) over the pattern's m + 1 tokens; *lcp = their common
   prefix (m + 1 when equal). */
static int cmp_pattern(const pattern *p, const ig_shard *a, int64_t y, int64_t k0, int64_t *lcp) {
    int64_t h = k0 < p->m ? k0 + lce(p->memo, p->w, a, y + k0, p->b, p->u + k0, p->m - k0) : p->m;
    if (h < p->m) {
        *lcp = h;
        /* (ordered by shard a's keys: an official shard sorts by bytes, with its end first) */
        return ig_key_at(a, p->w, y + h) < ig_key_of(a, p->w, ig_tok(p->b, p->w, p->u + h)) ? -1 : 1;
    }
    uint32_t x = ig_tok(a, p->w, y + p->m);
    *lcp = x == p->t ? p->m + 1 : p->m;
    return x == p->t ? 0 : (ig_key_at(a, p->w, y + p->m) < ig_key_of(a, p->w, p->t) ? -1 : 1);
}

/* First rank in (lo, hi) whose suffix is >= the pattern (strict = 0) or > it (strict = 1),
   given that every suffix strictly between lo and hi agrees with the pattern on at least
   `common` tokens. A binary search whose comparisons start at the smaller lcp of its two
   bounds (every suffix between them shares at least that much with the pattern). */
static int64_t bound_pattern(const pattern *p, const ig_shard *a, int64_t lo, int64_t hi, int64_t common,
                             int strict) {
    int64_t llcp = common, rlcp = common;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2, lcp;
        int c = cmp_pattern(p, a, ig_sa(a, mid), llcp < rlcp ? llcp : rlcp, &lcp);
        if (c < 0 || (strict && c == 0)) {
            lo = mid;
            llcp = lcp;
        } else {
            hi = mid;
            rlcp = lcp;
        }
    }
    return hi;
}

/* Ranges of the pattern in every shard of ix; returns the total count. */
static uint64_t find_pattern(const ig_index *ix, const pattern *p, ig_range *out) {
    uint64_t c = 0;
    uint32_t first = ig_tok(p->b, p->w, p->u);
    for (int i = 0; i < ix->n_shards; i++) {
        const ig_shard *a = &ix->shards[i];
        /* (a witness of a forged state may hold a separator: it matches no context) */
        ig_range r = first < ix->vocab_size ? ig_first_token_range(a, ix->token_width, first) : (ig_range){0, 0};
        if (r.hi > r.lo) { /* every suffix in r shares the first token with the pattern */
            int64_t lo = bound_pattern(p, a, r.lo - 1, r.hi, 1, 0);
            r = (ig_range){lo, bound_pattern(p, a, lo - 1, r.hi, 1, 1)};
        }
        out[i] = r;
        c += (uint64_t)(r.hi - r.lo);
    }
    return c;
}

/* ---------------------------------------------------------------- the back-off */

typedef struct {
    const ig_index *P, *M;
    pattern pat;
    int64_t w_end; /* the witness's end: C = text_b[w_end - l .. w_end) */
    ig_range *tmpp, *tmpm;
    int *neg;
} search;

/* Net count of the suffix of C + t of L tokens (2 <= L <= l); its ranges land in tmpp / tmpm. */
static int64_t count_suffix(search *s, int64_t L) {
    STAT(ig_st_pred);
    s->pat.m = L - 1;
    s->pat.u = s->w_end - (L - 1);
    int64_t c = (int64_t)find_pattern(s->P, &s->pat, s->tmpp);
    if (s->M) c -= (int64_t)find_pattern(s->M, &s->pat, s->tmpm);
    if (c < 0) *s->neg = 1;
    return c;
}

static void keep(const search *s, ig_range *curp, ig_range *curm) {
    memcpy(curp, s->tmpp, (size_t)s->P->n_shards * sizeof *curp);
    if (s->M) memcpy(curm, s->tmpm, (size_t)s->M->n_shards * sizeof *curm);
}

int64_t ig_backoff_long(const ig_index *P, const ig_index *M, const uint32_t *ctx, int64_t len, int64_t l,
                        int64_t short_max, ig_range *curp, ig_range *curm, ig_range *tmpp, ig_range *tmpm,
                        ig_lce_memo **memo, int *neg) {
    if (short_max < 1 || l <= short_max || len < 1) return -1;
    const ig_shard *ws = NULL;
    int64_t w = 0;
    for (int i = 0; i < P->n_shards && !ws; i++)
        if (curp[i].hi > curp[i].lo) {
            ws = &P->shards[i];
            w = ig_sa(ws, curp[i].lo);
        }
    if (!ws) return -2;
    STAT(ig_st_long);
    if (!*memo) *memo = calloc(1, sizeof **memo); /* (without one the search is only slower) */
    search s = {P, M, {*memo, P->token_width, ws, 0, 0, ctx[len - 1]}, w + l, tmpp, tmpm, neg};
    int64_t good = short_max + 1, bad = l + 1; /* C + t itself (l + 1 tokens) does not occur */
    if (count_suffix(&s, good) <= 0) return -1;
    keep(&s, curp, curm);
    /* gallop down from l (a repetitive stretch loses a token or a few), then bisect */
    for (int64_t step = 1; bad - step > good; step *= 2) {
        int64_t L = bad - step;
        if (count_suffix(&s, L) > 0) {
            good = L;
            keep(&s, curp, curm);
            break;
        }
        bad = L;
    }
    while (bad - good > 1) {
        int64_t mid = good + (bad - good) / 2;
        if (count_suffix(&s, mid) > 0) {
            good = mid;
            keep(&s, curp, curm);
        } else {
            bad = mid;
        }
    }
    return good;
}

int64_t ig_backoff(const ig_index *ix, const uint32_t *ctx, int64_t len, int64_t l, ig_range *cur, ig_range *tmp,
                   ig_lce_memo **memo) {
    if (l > IG_BACKOFF_SHORT) {
        int neg = 0;
        int64_t k = ig_backoff_long(ix, NULL, ctx, len, l, IG_BACKOFF_SHORT, cur, NULL, tmp, NULL, memo, &neg);
        if (k >= 0) return k;
        if (k == -1) l = IG_BACKOFF_SHORT;
    }
    return ig_longest_suffix(ix, ctx, len, l, cur, tmp);
}
