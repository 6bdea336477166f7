/* ntd_cache.c - build, map and look up precomputed next-token distributions (see ntd_cache.h).
 *
 * Building is one sequential pass over the suffix array: ranks are sorted by their first tokens,
 * so for each depth k in 1..3 the ranks of a k-token context are one block and, inside it, the
 * next tokens come in increasing runs. Each block's runs are collected; the block is kept when
 * walking it at query time would be expensive.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ntd_cache.h"

/* Estimated probes of a walk over a range of n ranks holding distinct next tokens. */
static int64_t ntc_walk_cost(int64_t n, int64_t distinct) {
    if (distinct <= 0 || n <= 0) return 0;
    /* a gallop plus a bisection per run: about 2 log2(run length + 1) probes each */
    double per_run = 2.0 * log2((double)n / (double)distinct + 1.0) + 1.0;
    return (int64_t)((double)distinct * per_run);
}

/* ---------------------------------------------------------------- building */

typedef struct {
    uint32_t *tok;
    uint32_t *cnt;
    int64_t n, cap;
} runs;

typedef struct {
    int64_t *rec; /* 4 per context */
    int64_t n_rec, rec_cap;
    uint32_t *ent; /* 2 per entry */
    int64_t n_ent, ent_cap;
} emitted;

static int grow_to(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int runs_push(runs *r, uint32_t t) {
    if (r->n && r->tok[r->n - 1] == t) {
        r->cnt[r->n - 1]++;
        return 0;
    }
    if (r->n == r->cap) {
        int64_t c = r->cap;
        if (grow_to((void **)&r->tok, &c, r->n + 1, sizeof *r->tok)) return -1;
        c = r->cap;
        if (grow_to((void **)&r->cnt, &c, r->n + 1, sizeof *r->cnt)) return -1;
        r->cap = c;
    }
    r->tok[r->n] = t;
    r->cnt[r->n++] = 1;
    return 0;
}

/* The block of ranks [lo, hi) at depth d ended: keep its runs if walking them is expensive or
   the context is frequent (then narrowing it by a token is a search in its entries). */
static int flush_block(emitted *e, const runs *r, int64_t d, int64_t lo, int64_t hi, int64_t min_cost) {
    /* quick reject without log2: a walk costs at most 3 probes per rank (one rank per run) */
    if (hi - lo < IG_NTC_MIN_COUNT(min_cost) && 3 * (hi - lo) < min_cost) return 0;
    if (hi <= lo || (ntc_walk_cost(hi - lo, r->n) < min_cost && hi - lo < IG_NTC_MIN_COUNT(min_cost))) return 0;
    if (grow_to((void **)&e->rec, &e->rec_cap, 4 * (e->n_rec + 1), sizeof *e->rec)) return -1;
    if (grow_to((void **)&e->ent, &e->ent_cap, 2 * (e->n_ent + r->n), sizeof *e->ent)) return -1;
    int64_t *rec = e->rec + 4 * e->n_rec++;
    rec[0] = d;
    rec[1] = lo;
    rec[2] = hi;
    rec[3] = e->n_ent; /* relative to this depth; rebased when written */
    uint32_t start = 0; /* entries hold each token's first rank, relative to lo */
    for (int64_t j = 0; j < r->n; j++) {
        e->ent[2 * (e->n_ent + j)] = r->tok[j];
        e->ent[2 * (e->n_ent + j) + 1] = start;
        start += r->cnt[j];
    }
    e->n_ent += r->n;
    return 0;
}

static int write_all(FILE *f, const void *p, size_t n) { return n && fwrite(p, 1, n, f) != n ? -1 : 0; }

enum { NTC_K = IG_NTC_MAX_DEPTH, NTC_AHEAD = 64 };

/* The first K+1 tokens of the suffix at pos (the separator past the end), and how many of them
   it shares with the previous rank's (*lcp, given prev) and where its first separator is among
   the first K (*firstsep; K when none). For 2-byte tokens the 4 tokens are one 8-byte load and
   both counts come from bit tricks: the loop runs once per rank, and branches on data it
   cannot predict cost more than its memory reads. */
static inline void first_tokens(const ig_shard *v, int width, int64_t pos, const uint32_t prev[NTC_K + 1],
                                int have_prev, uint32_t c[NTC_K + 1], int *lcp, int *firstsep) {
    if (width == 2 && pos + NTC_K + 1 <= v->total_len) {
        uint64_t x, px = 0;
        memcpy(&x, v->tokens + 2 * pos, 8);
        for (int k = 0; k <= NTC_K; k++) {
            c[k] = (uint32_t)(x >> (16 * k)) & 0xFFFF;
            px |= (uint64_t)prev[k] << (16 * k);
        }
        uint64_t diff = x ^ px, y = ~x; /* separator lanes of x are the zero lanes of y */
        uint64_t z = (y - 0x0001000100010001ull) & ~y & 0x8000800080008000ull; /* lowest is exact */
        *lcp = !have_prev ? 0 : diff ? __builtin_ctzll(diff) >> 4 : NTC_K + 1;
        int fs = z ? __builtin_ctzll(z) >> 4 : NTC_K;
        *firstsep = fs < NTC_K ? fs : NTC_K;
        return;
    }
    const uint32_t sep = ig_sep_for_width(width);
    int fs = NTC_K, l = 0;
    for (int k = 0; k <= NTC_K; k++) c[k] = ig_tok(v, width, pos + k);
    for (int j = NTC_K - 1; j >= 0; j--) fs = c[j] == sep ? j : fs;
    if (have_prev)
        while (l <= NTC_K && c[l] == prev[l]) l++;
    *lcp = l;
    *firstsep = fs;
}

/* Collect the cached contexts of ranks [r0, r1) into em[1..K]. r0 must start a new first
   token (or be 0) and r1 end one (or be n_tok): no context straddles the range's ends. The
   suffixes come in sorted order, so with lcp = how many leading tokens a rank shares with the
   previous one, depth k's block goes on iff lcp >= k and its current run iff lcp > k. */
static int collect(const ig_shard *view, int width, const int32_t *sa, int64_t r0, int64_t r1,
                   int64_t min_cost, emitted em[NTC_K + 1]) {
    runs rs[NTC_K + 1];
    int64_t block_lo[NTC_K + 1];
    uint32_t prev[NTC_K + 1] = {0};
    int have_prev = 0, rc = 0;
    memset(rs, 0, sizeof rs);
    for (int64_t r = r0; r <= r1 && !rc; r++) {
        uint32_t c[NTC_K + 1];
        int firstsep = 0, lcp = 0; /* end of the rank's context tokens; tokens shared with prev */
        if (r < r1) {
            if (r + NTC_AHEAD < r1) __builtin_prefetch(view->tokens + (size_t)sa[r + NTC_AHEAD] * (size_t)width);
            first_tokens(view, width, sa[r], prev, have_prev, c, &lcp, &firstsep);
            if (lcp > NTC_K) { /* the usual case: same K+1 tokens, every valid run goes on */
                for (int k = 1; k <= firstsep; k++) rs[k].cnt[rs[k].n - 1]++;
                continue;
            }
        }
        for (int k = 1; k <= NTC_K && !rc; k++) {
            int valid = k <= firstsep, same = valid && lcp >= k; /* (an equal prefix has no sep) */
            if (!same) {
                if (rs[k].n && flush_block(&em[k], &rs[k], k, block_lo[k], r, min_cost)) rc = -1;
                rs[k].n = 0;
                block_lo[k] = r;
            }
            if (!valid || rc) continue;
            if (same && lcp > k) rs[k].cnt[rs[k].n - 1]++;
            else if (runs_push(&rs[k], c[k])) rc = -1;
        }
        if (r < r1) {
            memcpy(prev, c, sizeof prev);
            have_prev = 1;
        }
    }
    for (int k = 0; k <= NTC_K; k++) {
        free(rs[k].tok);
        free(rs[k].cnt);
    }
    return rc;
}

/* The pass is bound by its random token reads, so a large shard is cut in two at a change of
   first token (no context spans the cut) and the halves are collected on two threads. */
typedef struct {
    const ig_shard *view;
    const int32_t *sa;
    int width, rc;
    int64_t r0, r1, min_cost;
    emitted em[NTC_K + 1];
} collect_job;

static void *collect_run(void *arg) {
    collect_job *j = arg;
    j->rc = collect(j->view, j->width, j->sa, j->r0, j->r1, j->min_cost, j->em);
    return NULL;
}

/* Append b's contexts (ranks after a's) to a's, rebasing b's entry offsets. */
static int em_append(emitted *a, const emitted *b) {
    if (grow_to((void **)&a->rec, &a->rec_cap, 4 * (a->n_rec + b->n_rec), sizeof *a->rec) ||
        grow_to((void **)&a->ent, &a->ent_cap, 2 * (a->n_ent + b->n_ent), sizeof *a->ent))
        return -1;
    for (int64_t i = 0; i < b->n_rec; i++) {
        int64_t *r = a->rec + 4 * (a->n_rec + i);
        memcpy(r, b->rec + 4 * i, 4 * sizeof *r);
        r[3] += a->n_ent;
    }
    if (b->n_ent) memcpy(a->ent + 2 * a->n_ent, b->ent, (size_t)b->n_ent * 2 * sizeof *a->ent);
    a->n_rec += b->n_rec;
    a->n_ent += b->n_ent;
    return 0;
}

int ig_ntc_write(const ig_shard *view, int width, const int32_t *sa, int64_t n_tok, int64_t min_cost,
                 const char *dir, char *err, size_t errlen) {
    if (min_cost <= 0) return IG_OK;
    enum { K = NTC_K };
    emitted em[K + 1];
    int rc = IG_OK;
    memset(em, 0, sizeof em);
    int64_t mid = n_tok >= ((int64_t)1 << 22) && sysconf(_SC_NPROCESSORS_ONLN) > 1
                      ? ig_first_token_run_end(view, width, sa, n_tok / 2, n_tok) : n_tok;
    collect_job hi = {.view = view, .sa = sa, .width = width, .r0 = mid, .r1 = n_tok, .min_cost = min_cost};
    pthread_t th;
    int threaded = mid < n_tok && pthread_create(&th, NULL, collect_run, &hi) == 0;
    if (collect(view, width, sa, 0, threaded ? mid : n_tok, min_cost, em)) rc = IG_ERR_NOMEM;
    if (threaded) {
        pthread_join(th, NULL);
        for (int k = 1; k <= K; k++) {
            if (!rc && (hi.rc || em_append(&em[k], &hi.em[k]))) rc = IG_ERR_NOMEM;
            free(hi.em[k].rec);
            free(hi.em[k].ent);
        }
    }
    if (rc) {
        ig_fail(err, errlen, rc, "out of memory collecting next-token distributions");
    } else {
        int64_t n_rec = 0, n_ent = 0;
        for (int k = 1; k <= K; k++) {
            n_rec += em[k].n_rec;
            n_ent += em[k].n_ent;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, IG_NTC_FILE);
        int fd = ig_create_index_file(path);
        FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
        if (!f) {
            if (fd >= 0) close(fd);
            rc = ig_fail(err, errlen, IG_ERR_IO, "%s: cannot create (%s)", path, strerror(errno));
        } else {
            ig_header h;
            memset(&h, 0, sizeof h);
            memcpy(h.magic, "IGHF-NTC", 8);
            h.version = IG_FORMAT_VERSION;
            h.width = 32;
            h.count = (uint64_t)n_rec;
            h.aux1 = (uint64_t)n_ent;
            h.aux2 = (uint64_t)IG_NTC_MIN_COUNT(min_cost);
            int bad = write_all(f, &h, sizeof h);
            int64_t base = 0;
            for (int k = 1; k <= K && !bad; k++) {
                for (int64_t i = 0; i < em[k].n_rec; i++) em[k].rec[4 * i + 3] += base;
                bad = write_all(f, em[k].rec, (size_t)em[k].n_rec * 4 * sizeof(int64_t));
                base += em[k].n_ent;
            }
            for (int k = 1; k <= K && !bad; k++)
                bad = write_all(f, em[k].ent, (size_t)em[k].n_ent * 2 * sizeof(uint32_t));
            int e = errno;
            bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
            bad |= fclose(f) != 0;
            if (bad) rc = ig_fail(err, errlen, IG_ERR_IO, "%s: write failed (%s)", path, strerror(e ? e : errno));
        }
    }
    for (int k = 0; k <= K; k++) {
        free(em[k].rec);
        free(em[k].ent);
    }
    return rc;
}

/* ---------------------------------------------------------------- reading */

void ig_ntc_close(ig_shard *s) {
    free(s->ntc_lo);
    s->ntc_lo = NULL;
    free(s->ntc_bucket);
    s->ntc_bucket = NULL;
    free(s->ntc_checked);
    s->ntc_checked = NULL;
    if (s->ntc_map.base) munmap((void *)s->ntc_map.base, s->ntc_map.size);
    s->ntc_map.base = NULL;
    s->ntc_rec = NULL;
    s->ntc_ent = NULL;
    s->ntc_n = s->ntc_entries = 0;
}

static int bad_file(ig_shard *s, const char *dir, const char *what, char *err, size_t errlen) {
    ig_ntc_close(s);
    return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: %s", dir, IG_NTC_FILE, what);
}

int ig_ntc_open(ig_shard *s, int dirfd, const char *dir, int width, uint32_t vocab, char *err, size_t errlen) {
    int fd;
    struct stat st;
    int rc = ig_open_index_file(dirfd, dir, IG_NTC_FILE, 1 | s->links, &fd, &st, err, errlen);
    if (rc || fd < 0) return rc; /* (absent: the file is optional) */
    if ((size_t)st.st_size < IG_HEADER_SIZE) {
        close(fd);
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: truncated", dir, IG_NTC_FILE);
    }
    ig_header h0;  /* open reads the records only (the entries are checked on first use) */
    if (pread(fd, &h0, sizeof h0, 0) == (ssize_t)sizeof h0 && h0.count < ((uint64_t)1 << 31))
        (void)posix_fadvise(fd, 0, (off_t)(IG_HEADER_SIZE + 32 * h0.count), POSIX_FADV_WILLNEED);
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return ig_fail(err, errlen, IG_ERR_IO, "%s/%s: mmap failed (%s)", dir, IG_NTC_FILE, strerror(errno));
    if ((size_t)st.st_size > IG_SMALL_FILE) (void)madvise(p, (size_t)st.st_size, MADV_RANDOM);
    s->ntc_map.base = p;
    s->ntc_map.size = (size_t)st.st_size;
    ig_header h;
    memcpy(&h, p, sizeof h);
    if (memcmp(h.magic, "IGHF-NTC", 8) != 0) return bad_file(s, dir, "bad magic", err, errlen);
    if (h.version != IG_FORMAT_VERSION) return bad_file(s, dir, "unsupported format version", err, errlen);
    if (h.width != 32 || h.count >= ((uint64_t)1 << 31) || h.aux1 > ((uint64_t)1 << 40) ||
        IG_HEADER_SIZE + 32 * h.count + 8 * h.aux1 != (uint64_t)st.st_size)
        return bad_file(s, dir, "size does not match its header: truncated or corrupt", err, errlen);
    const int64_t *rec = (const int64_t *)((const uint8_t *)p + IG_HEADER_SIZE);
    const uint32_t *ent = (const uint32_t *)(rec + 4 * h.count);
    int64_t n = (int64_t)h.count, m = (int64_t)h.aux1;
    /* Records come sorted by (depth, lo), and the ranges of one depth are disjoint (lo at or past
       the previous hi), so keys increase strictly: a binary search finds them. Open reads each
       record once, whatever the values. */
    for (int64_t i = 0; i < n; i++) {
        const int64_t *q = rec + 4 * i;
        int64_t end = i + 1 < n ? q[7] : m;
        if (q[0] < 1 || q[0] > IG_NTC_MAX_DEPTH || q[1] < 0 || q[2] <= q[1] || q[2] > s->num_tokens ||
            q[3] < 0 || end < q[3] || end > m || (i == 0 && q[3] != 0) ||
            (i > 0 && (q[0] < q[-4] || (q[0] == q[-4] && q[1] < q[-2]))))
            return bad_file(s, dir, "context records out of order or out of range", err, errlen);
        if (end == q[3]) return bad_file(s, dir, "a context without entries", err, errlen);
    }
    /* The entries (most of the file) are checked per record on first use, not here: opening
       reads only the records (a cold 100M-token index opened in ~100 ms when it read them all). */
    s->ntc_rec = rec;
    s->ntc_ent = ent;
    s->ntc_vocab = vocab;
    s->ntc_sep = ig_sep_for_width(width);
    s->ntc_checked = calloc((size_t)(n > 0 ? n : 1), 1);
    s->ntc_lo = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->ntc_lo);
    if (!s->ntc_checked || !s->ntc_lo) {
        ig_ntc_close(s);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    /* the keys side by side (8 bytes a record instead of a 32-byte stride), and per depth a table
       of buckets of ranks (about as many as records) pointing into them: a lookup reads one
       bucket and searches the few records in it. Built in O(records), whatever the keys; keys
       crafted into one bucket only make that bucket's search a binary search. */
    int64_t i = 0, n_buckets = 0;
    s->ntc_depth_at[0] = 0;
    for (int d = 1; d <= IG_NTC_MAX_DEPTH + 1; d++) { /* ntc_depth_at[d]: the first record of depth d */
        while (i < n && rec[4 * i] < d) {
            s->ntc_lo[i] = rec[4 * i + 1];
            i++;
        }
        s->ntc_depth_at[d] = i;
    }
    for (int d = 1; d <= IG_NTC_MAX_DEPTH; d++) {
        int64_t count = s->ntc_depth_at[d + 1] - s->ntc_depth_at[d], nb = 1;
        int shift = 0;
        while (nb < count) nb *= 2;
        while (((uint64_t)(s->num_tokens > 0 ? s->num_tokens - 1 : 0) >> shift) >= (uint64_t)nb) shift++;
        s->ntc_shift[d] = shift;
        s->ntc_bucket_at[d] = n_buckets;
        n_buckets += nb + 1;
    }
    s->ntc_bucket_at[IG_NTC_MAX_DEPTH + 1] = n_buckets;
    s->ntc_bucket = malloc((size_t)n_buckets * sizeof *s->ntc_bucket);
    if (!s->ntc_bucket) {
        ig_ntc_close(s);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    for (int d = 1; d <= IG_NTC_MAX_DEPTH; d++) {
        int64_t j = s->ntc_depth_at[d], end = s->ntc_depth_at[d + 1];
        int64_t nb = s->ntc_bucket_at[d + 1] - s->ntc_bucket_at[d] - 1;
        uint32_t *bucket = s->ntc_bucket + s->ntc_bucket_at[d];
        for (int64_t k = 0; k <= nb; k++) {
            while (j < end && (s->ntc_lo[j] >> s->ntc_shift[d]) < k) j++;
            bucket[k] = (uint32_t)j;
        }
    }
    s->ntc_n = n;
    s->ntc_entries = m;
    s->ntc_min_count = (int64_t)h.aux2 > 0 ? (int64_t)h.aux2 : INT64_MAX;
    return IG_OK;
}

/* The record of the context whose range at depth d is r, or NULL: its bucket of ranks, then a
   binary search among the records in it (usually none or one). */
static const int64_t *find_record(const ig_shard *s, int64_t d, ig_range r) {
    const uint32_t *bucket = s->ntc_bucket + s->ntc_bucket_at[d];
    uint64_t k = (uint64_t)r.lo >> s->ntc_shift[d];
    if (r.lo < 0 || k >= (uint64_t)(s->ntc_bucket_at[d + 1] - s->ntc_bucket_at[d] - 1)) return NULL;
    int64_t a = bucket[k], b = bucket[k + 1], end = b;
    const int64_t *lo = s->ntc_lo;
    while (a < b) { /* the first record with lo >= r.lo (lo increases strictly within a depth) */
        int64_t mid = a + (b - a) / 2;
        if (lo[mid] < r.lo) a = mid + 1; else b = mid;
    }
    if (a == end || lo[a] != r.lo) return NULL;
    const int64_t *q = s->ntc_rec + 4 * a;
    return q[2] == r.hi ? q : NULL;
}

static int64_t record_end(const ig_shard *s, const int64_t *q) {
    return q + 4 < s->ntc_rec + 4 * s->ntc_n ? q[7] : s->ntc_entries;
}

/* Whether the record's entries are well formed: tokens in the vocabulary (or the separator),
   strictly increasing, with offsets starting at 0, increasing and inside the context's range. */
static int entries_ok(const ig_shard *s, const int64_t *q) {
    const uint32_t *ent = s->ntc_ent;
    uint32_t sep = s->ntc_sep;
    int64_t end = record_end(s, q);
    if (ent[2 * q[3] + 1] != 0) return 0;
    for (int64_t j = q[3]; j < end; j++) {
        if ((ent[2 * j] >= s->ntc_vocab && ent[2 * j] != sep) || (int64_t)ent[2 * j + 1] >= q[2] - q[1] ||
            (j > q[3] && (ent[2 * j] <= ent[2 * j - 2] || ent[2 * j + 1] <= ent[2 * j - 1])))
            return 0;
    }
    return 1;
}

const uint32_t *ig_ntc_find(const ig_shard *s, int64_t d, ig_range r, int64_t *n) {
    if (d < 1 || d > IG_NTC_MAX_DEPTH || !s->ntc_n) return NULL;
    const int64_t *q = find_record(s, d, r);
    if (!q) return NULL;
    int64_t i = (q - s->ntc_rec) / 4;
    uint8_t c = __atomic_load_n(&s->ntc_checked[i], __ATOMIC_ACQUIRE);
    if (!c) { /* threads racing here compute the same verdict */
        c = entries_ok(s, q) ? 1 : 2;
        __atomic_store_n(&s->ntc_checked[i], c, __ATOMIC_RELEASE);
    }
    if (c != 1) return NULL; /* a corrupt record: answer from the suffix array instead */
    *n = record_end(s, q) - q[3];
    return s->ntc_ent + 2 * q[3];
}

int ig_ntc_narrow(const ig_shard *s, int64_t d, ig_range r, uint32_t t, ig_range *out) {
    int64_t n;
    const uint32_t *e = ig_ntc_find(s, d, r, &n);
    if (!e) return 0;
    int64_t a = 0, b = n;
    while (a < b) { /* first entry with token >= t */
        int64_t mid = a + (b - a) / 2;
        if (e[2 * mid] < t) a = mid + 1; else b = mid;
    }
    ig_ntc_pick(e, n, a, r, t, out);
    return 1;
}

void ig_ntc_pick(const uint32_t *e, int64_t n, int64_t a, ig_range r, uint32_t t, ig_range *out) {
    if (a < n && e[2 * a] == t) {
        out->lo = r.lo + e[2 * a + 1];
        out->hi = a + 1 < n ? r.lo + e[2 * a + 3] : r.hi;
    } else {
        out->lo = out->hi = a < n ? r.lo + e[2 * a + 1] : r.hi;
    }
}

/* find_record's first loads: the bucket of r.lo at depth d ... */
static const uint32_t *bucket_of(const ig_shard *s, int64_t d, ig_range r) {
    if (d < 1 || d > IG_NTC_MAX_DEPTH || !s->ntc_n || r.lo < 0) return NULL;
    uint64_t k = (uint64_t)r.lo >> s->ntc_shift[d];
    if (k >= (uint64_t)(s->ntc_bucket_at[d + 1] - s->ntc_bucket_at[d] - 1)) return NULL;
    return s->ntc_bucket + s->ntc_bucket_at[d] + k;
}

void ig_ntc_prefetch_bucket(const ig_shard *s, int64_t d, ig_range r) {
    const uint32_t *b = bucket_of(s, d, r);
    if (b) __builtin_prefetch(b);
}

/* ... then the bucket's first record (usually the only candidate) and its check mark. */
void ig_ntc_prefetch_record(const ig_shard *s, int64_t d, ig_range r) {
    const uint32_t *b = bucket_of(s, d, r);
    if (!b || b[0] >= b[1]) return;
    __builtin_prefetch(s->ntc_lo + b[0]);
    __builtin_prefetch(s->ntc_rec + 4 * (int64_t)b[0]);
    __builtin_prefetch(s->ntc_checked + b[0]);
}

int64_t ig_ntc_copy(const uint32_t *e, int64_t n, ig_range r, uint32_t *toks, uint64_t *cnts, int64_t cap) {
    for (int64_t j = 0; j < n && j < cap; j++) {
        toks[j] = e[2 * j];
        cnts[j] = (uint64_t)((j + 1 < n ? (int64_t)e[2 * j + 3] : r.hi - r.lo) - (int64_t)e[2 * j + 1]);
    }
    return n;
}
