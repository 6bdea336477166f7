/* find_many.c - interleaved suffix-array searches (see find_many.h).
 *
 * Each search ("lane") first takes the query's first-token range from the unigram table and
 * narrows it through the build-time cache of short contexts while that applies (query.c does
 * the same), then bisects the rest of the query as a whole against the text. It is a small state
 * machine so that it can stop at every load that may miss:
 *   stage 0: the suffix-array entries of its probes were prefetched; read them, prefetch the
 *            tokens they point to;
 *   stage 1: those tokens were prefetched; compare, narrow, pick and prefetch the next probes.
 * The bisection first looks for any rank that matches (one probe per step); from there the lower
 * and the upper bound are searched on either side of it together (two independent probes per
 * step), the equal-range search of query.c.
 */
#include "find_many.h"
#include "ntd_cache.h"

/* Ranges this short are narrowed on the spot (query.c: a scan of independent loads) rather
   than given a lane. */
#define IG_LANE_MIN 32

typedef struct {
    int64_t idx;       /* the query's index in the batch; -1 when the lane is free */
    const uint32_t *p; /* the part of the query still to match, at depth d */
    int64_t m, d;
    int64_t a, b;      /* the search interval (phase 1: of the lower bound) */
    int64_t ua, ub;    /* phase 1: the interval of the upper bound */
    int64_t mid, umid; /* probes in flight */
    int64_t pos, upos; /* their text positions (stage 1) */
    int phase, stage;
} lane;

static inline void prefetch_sa(const ig_shard *s, int64_t r) {
    __builtin_prefetch(s->sa + (size_t)r * (size_t)s->sa_width);
}

/* The tokens a comparison at text position pos will read first (positions past the text are
   never loaded: ig_tok reads them as the separator). */
static inline void prefetch_text(const ig_shard *s, int w, int64_t pos, int64_t m) {
    if ((uint64_t)pos >= (uint64_t)s->total_len) return;
    const uint8_t *t = s->tokens + (size_t)pos * (size_t)w;
    __builtin_prefetch(t);
    if (m > 1) {
        int64_t last = pos + (m < 16 ? m : 16) - 1;
        if (last >= s->total_len) last = s->total_len - 1;
        __builtin_prefetch(s->tokens + (size_t)last * (size_t)w);
    }
}

/* The suffix at pos from depth d against p[0..m): <0, 0 (p is a prefix of it), >0. */
static inline int cmp_text(const ig_shard *s, int w, int64_t pos, int64_t d, const uint32_t *p, int64_t m) {
    for (int64_t k = 0; k < m; k++) {
        uint32_t t = ig_tok(s, w, pos + d + k);
        if (t != p[k]) return t < p[k] ? -1 : 1;
    }
    return 0;
}

/* Set lane L to search p[0..m) at depth d in r (non-empty, m >= 1), its first probe prefetched. */
static void lane_begin(lane *L, const ig_shard *s, ig_range r, int64_t d, const uint32_t *p, int64_t m) {
    L->p = p;
    L->m = m;
    L->d = d;
    L->a = r.lo;
    L->b = r.hi;
    L->phase = 0;
    L->stage = 0;
    L->mid = L->a + (L->b - L->a) / 2;
    prefetch_sa(s, L->mid);
}

/* Queries narrowed together through the short-context cache (narrow_block), then searched. */
#define IG_FIND_BLOCK 256

typedef struct {
    const ig_query *qs;
    ig_range r[IG_FIND_BLOCK]; /* each query's range after the cache, at depth d */
    int64_t d[IG_FIND_BLOCK];
} find_block;

/* For queries qs[0..n) (n <= IG_FIND_BLOCK): the first-token range, narrowed through the
   short-context cache while that applies -- query.c's loop (while the depth is below the query's
   length and at most IG_NTC_MAX_DEPTH, and the range holds >= 64 ranks, and the context is
   cached), run depth by depth across the block. Each query's lookups are a chain of dependent
   loads (bucket, record, entries by binary search); taking the queries in turns with the next
   load prefetched overlaps the chains' misses instead of adding them up. */
static void narrow_block(const ig_shard *s, int w, find_block *B, int64_t n) {
    const ig_query *qs = B->qs;
    uint8_t live[IG_FIND_BLOCK];
    const uint32_t *e[IG_FIND_BLOCK];
    int64_t m[IG_FIND_BLOCK], a[IG_FIND_BLOCK], b[IG_FIND_BLOCK];
    for (int64_t i = 0; i < n; i++) {
        B->d[i] = qs[i].len ? 1 : 0;
        B->r[i] = qs[i].len ? ig_first_token_range(s, w, qs[i].q[0]) : (ig_range){0, s->num_tokens};
        live[i] = qs[i].len > 0 && s->ntc_n;
    }
    for (int64_t depth = 1; depth <= IG_NTC_MAX_DEPTH; depth++) {
        int any = 0;
        for (int64_t i = 0; i < n; i++) {
            if (live[i] && !(depth < qs[i].len && B->r[i].hi - B->r[i].lo >= 64)) live[i] = 0;
            if (live[i]) ig_ntc_prefetch_bucket(s, depth, B->r[i]), any = 1;
        }
        if (!any) return;
        for (int64_t i = 0; i < n; i++)
            if (live[i]) ig_ntc_prefetch_record(s, depth, B->r[i]);
        for (int64_t i = 0; i < n; i++) {
            if (!live[i]) continue;
            e[i] = ig_ntc_find(s, depth, B->r[i], &m[i]);
            if (!e[i]) { live[i] = 0; continue; } /* not cached: the search takes it from here */
            a[i] = 0;
            b[i] = m[i];
            if (a[i] < b[i]) __builtin_prefetch(e[i] + 2 * ((a[i] + b[i]) / 2));
        }
        for (int more = 1; more;) { /* the entries' binary searches, one step each per turn */
            more = 0;
            for (int64_t i = 0; i < n; i++) {
                if (!live[i] || a[i] >= b[i]) continue;
                int64_t mid = a[i] + (b[i] - a[i]) / 2;
                if (e[i][2 * mid] < qs[i].q[depth]) a[i] = mid + 1; else b[i] = mid;
                if (a[i] < b[i]) __builtin_prefetch(e[i] + 2 * (a[i] + (b[i] - a[i]) / 2)), more = 1;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            if (!live[i]) continue;
            ig_ntc_pick(e[i], m[i], a[i], B->r[i], qs[i].q[depth], &B->r[i]);
            B->d[i] = depth + 1;
        }
    }
}

/* Start query i of the block in lane L. Returns 0 when it is answered already (in *res), else 1. */
static int lane_start_find(lane *L, const ig_shard *s, int w, const void *ctx, int64_t i, ig_range *res) {
    const find_block *B = ctx;
    const uint32_t *q = B->qs[i].q;
    int64_t len = B->qs[i].len, d = B->d[i];
    ig_range r = B->r[i];
    if (len == 0) {
        *res = r;
        return 0;
    }
    if (d == len || r.hi <= r.lo) {
        *res = r;
        return 0;
    }
    if (r.hi - r.lo <= IG_LANE_MIN) { /* short: query.c's scan is cheaper than a bisection */
        *res = ig_narrow(s, w, r, d, q + d, len - d);
        return 0;
    }
    lane_begin(L, s, r, d, q + d, len - d);
    return 1;
}

typedef struct {
    const ig_range *rs; /* per row: n_shards ranges */
    const int64_t *ds;
    const uint32_t *ts;
    int shard, n_shards;
} narrow_ctx;

/* Start extension i (ig_extend_ranges' rules for one shard) in lane L. */
static int lane_start_narrow(lane *L, const ig_shard *s, int w, const void *ctx, int64_t i, ig_range *res) {
    const narrow_ctx *c = ctx;
    ig_range r = c->rs[i * c->n_shards + c->shard];
    int64_t d = c->ds[i];
    const uint32_t *t = c->ts + i;
    if (d == 0 && r.lo == 0 && r.hi == s->num_tokens) *res = ig_first_token_range(s, w, *t);
    else if (r.hi <= r.lo) *res = r;
    else if (r.hi - r.lo <= IG_LANE_MIN) *res = ig_narrow1(s, w, r, d, *t); /* short: scanned */
    else if (!(s->ntc_n && d >= 1 && d <= IG_NTC_MAX_DEPTH && r.hi - r.lo >= 64 && ig_ntc_narrow(s, d, r, *t, res))) {
        lane_begin(L, s, r, d, t, 1);
        return 1;
    }
    return 0;
}

/* One stage of lane L. Returns 0 when its search is finished (answer in *res). */
static inline int lane_step(lane *L, const ig_shard *s, int w, ig_range *res) {
    int lower = L->a < L->b, upper = L->phase && L->ua < L->ub;
    if (L->stage == 0) {
        if (lower) {
            L->pos = ig_sa(s, L->mid) + L->d;
            prefetch_text(s, w, L->pos, L->m);
        }
        if (upper) {
            L->upos = ig_sa(s, L->umid) + L->d;
            prefetch_text(s, w, L->upos, L->m);
        }
        L->stage = 1;
        return 1;
    }
    if (L->phase == 0) {
        int c = cmp_text(s, w, L->pos, 0, L->p, L->m);
        if (c < 0) L->a = L->mid + 1;
        else if (c > 0) L->b = L->mid;
        else { /* a match: the lower bound lies in [a, mid], the upper in [mid + 1, b] */
            L->phase = 1;
            L->ua = L->mid + 1;
            L->ub = L->b;
            L->b = L->mid;
        }
        if (L->a >= L->b && L->phase == 0) {
            *res = (ig_range){L->a, L->a};
            return 0;
        }
    } else {
        if (lower) {
            if (cmp_text(s, w, L->pos, 0, L->p, L->m) < 0) L->a = L->mid + 1;
            else L->b = L->mid;
        }
        if (upper) {
            if (cmp_text(s, w, L->upos, 0, L->p, L->m) <= 0) L->ua = L->umid + 1;
            else L->ub = L->umid;
        }
        if (L->a >= L->b && L->ua >= L->ub) {
            *res = (ig_range){L->a, L->ua};
            return 0;
        }
    }
    if (L->a < L->b) {
        L->mid = L->a + (L->b - L->a) / 2;
        prefetch_sa(s, L->mid);
    }
    if (L->phase && L->ua < L->ub) {
        L->umid = L->ua + (L->ub - L->ua) / 2;
        prefetch_sa(s, L->umid);
    }
    L->stage = 0;
    return 1;
}

typedef int (*lane_start_fn)(lane *L, const ig_shard *s, int w, const void *ctx, int64_t i, ig_range *res);

/* Work items [0, n) through the lanes: out[i * stride] = the answer of item i. */
static inline void run_lanes(const ig_shard *s, int w, int64_t n, lane_start_fn start, const void *ctx,
                             ig_range *out, int64_t stride) {
    lane lanes[IG_FIND_LANES];
    int64_t next = 0;
    int busy = 0;
    for (int k = 0; k < IG_FIND_LANES; k++) lanes[k].idx = -1;
    for (;;) {
        for (int k = 0; k < IG_FIND_LANES; k++) {
            lane *L = &lanes[k];
            ig_range res;
            if (L->idx >= 0) {
                if (lane_step(L, s, w, &res)) continue;
                out[L->idx * stride] = res;
                L->idx = -1;
                busy--;
            }
            while (next < n) { /* refill: items answered at once do not take the lane */
                int64_t i = next++;
                if (start(L, s, w, ctx, i, &res)) {
                    L->idx = i;
                    busy++;
                    break;
                }
                out[i * stride] = res;
            }
        }
        if (!busy && next >= n) return;
    }
}

void ig_find_many(const ig_shard *s, int w, const ig_query *qs, int64_t n, ig_range *out, int64_t stride) {
    find_block B;
    for (int64_t i = 0; i < n; i += IG_FIND_BLOCK) {
        int64_t k = n - i < IG_FIND_BLOCK ? n - i : IG_FIND_BLOCK;
        B.qs = qs + i;
        narrow_block(s, w, &B, k);
        run_lanes(s, w, k, lane_start_find, &B, out + i * stride, stride);
    }
}

void ig_find_many_all(const ig_index *ix, const ig_query *qs, int64_t n, ig_range *out, uint64_t *counts) {
    int ns = ix->n_shards;
    for (int sh = 0; sh < ns; sh++) ig_find_many(&ix->shards[sh], ix->token_width, qs, n, out + sh, ns);
    if (!counts) return;
    for (int64_t i = 0; i < n; i++) {
        uint64_t c = 0;
        for (int sh = 0; sh < ns; sh++) c += (uint64_t)(out[i * ns + sh].hi - out[i * ns + sh].lo);
        counts[i] = c;
    }
}

void ig_extend_many(const ig_index *ix, const ig_range *rs, const int64_t *ds, const uint32_t *ts, int64_t n,
                    ig_range *next, uint64_t *counts) {
    int ns = ix->n_shards;
    for (int sh = 0; sh < ns; sh++) {
        narrow_ctx c = {rs, ds, ts, sh, ns};
        run_lanes(&ix->shards[sh], ix->token_width, n, lane_start_narrow, &c, next + sh, ns);
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t c = 0;
        for (int sh = 0; sh < ns; sh++) c += (uint64_t)(next[i * ns + sh].hi - next[i * ns + sh].lo);
        counts[i] = c;
    }
}
