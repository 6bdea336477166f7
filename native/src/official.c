/* official.c - an official infini-gram (2.6.0) shard served in place.
 *
 * Their layout: tokenized.{s} = for each document, the separator (all-ones token) then its ids,
 * little-endian, no separator after the last one; table.{s} = every position's byte offset
 * (separators' included) in `ratio` bytes, sorted by memcmp of the bytes from there to the end of
 * the file; offset.{s} = u64 byte offset of each document's separator. See docs/FORMAT.md.
 *
 * We read it as our own layout through three views (common.h): positions are shifted by one
 * token, so each document is followed by a separator and the end of the file becomes a virtual
 * final separator; a pointer is its byte offset >> log2(width), minus one; and ordering compares
 * keys (byte-swapped id + 1, end of file = 0) instead of ids. Suffixes starting with a separator
 * sort after every other, so ranks [0, num_tokens) are exactly ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "official.h"

static int map_raw(const ig_shard *s, ig_map *m, int dirfd, const char *dir, const char *name, char *err, size_t errlen) {
    int fd, rc;
    struct stat st;
    if ((rc = ig_open_index_file(dirfd, dir, name, s->links, &fd, &st, err, errlen))) return rc;
    if (st.st_size == 0) {
        close(fd);
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: empty", dir, name);
    }
    if (st.st_size <= ((off_t)8 << 20)) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return ig_fail(err, errlen, IG_ERR_IO, "%s/%s: mmap failed (%s)", dir, name, strerror(errno));
    (void)madvise(p, (size_t)st.st_size, MADV_RANDOM);
    m->base = p;
    m->size = (size_t)st.st_size;
    return IG_OK;
}

typedef struct {
    uint32_t tok;
    uint64_t cnt;
    int64_t rank;
} uni_entry;

static int by_tok(const void *x, const void *y) {
    uint32_t a = ((const uni_entry *)x)->tok, b = ((const uni_entry *)y)->tok;
    return (a > b) - (a < b);
}

/* The first token's runs over ranks [0, num_tokens), by galloping: (id, count, first rank). */
static int count_unigram(ig_shard *s, int w, uint32_t vocab, const char *dir, const char *tname, char *err,
                         size_t errlen) {
    int64_t cap = 1024, n = 0;
    uni_entry *v = malloc((size_t)cap * sizeof *v);
    if (!v) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    uint64_t prev_key = 0;
    for (int64_t i = 0; i < s->num_tokens;) {
        uint32_t t = ig_tok(s, w, ig_sa(s, i));
        uint64_t key = ig_key_of(s, w, t);
        if (t >= vocab || (n > 0 && key <= prev_key)) {
            free(v);
            if (t == ig_sep_for_width(w))
                return ig_fail(err, errlen, IG_ERR_FORMAT,
                               "%s/%s: rank %lld starts with a separator: the documents in the offset file do not "
                               "match the token file", dir, tname, (long long)i);
            if (t >= vocab)
                return ig_fail(err, errlen, IG_ERR_FORMAT,
                               "%s/%s: token id %u occurs, but vocab_size is %u (pass the tokenizer's vocab_size)",
                               dir, tname, t, vocab);
            return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: not sorted by bytes (rank %lld): not an infini-gram table",
                           dir, tname, (long long)i);
        }
        prev_key = key;
        int64_t step = 1, last = i;
        while (i + step < s->num_tokens && ig_tok(s, w, ig_sa(s, i + step)) == t) { last = i + step; step <<= 1; }
        int64_t a = last + 1, b = i + step < s->num_tokens ? i + step : s->num_tokens;
        while (a < b) {
            int64_t mid = a + (b - a) / 2;
            if (ig_tok(s, w, ig_sa(s, mid)) == t) a = mid + 1; else b = mid;
        }
        if (n == cap) {
            uni_entry *g = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!g) { free(v); return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory"); }
            v = g;
        }
        v[n++] = (uni_entry){t, (uint64_t)(a - i), i};
        i = a;
    }
    qsort(v, (size_t)n, sizeof *v, by_tok);
    s->uni_owned = malloc(((size_t)n * 2 + 1) * sizeof(uint64_t));
    s->uni_key_rank = malloc(((size_t)n + 1) * sizeof(int64_t));
    if (!s->uni_owned || !s->uni_key_rank) {
        free(v);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    for (int64_t j = 0; j < n; j++) {
        s->uni_owned[2 * j] = v[j].tok;
        s->uni_owned[2 * j + 1] = v[j].cnt;
        s->uni_key_rank[j] = v[j].rank;
    }
    free(v);
    s->uni = s->uni_owned;
    s->n_uni = n;
    return IG_OK;
}

int ig_official_open_shard(ig_shard *s, int dirfd, const char *dir, const char *suffix, int w, uint32_t vocab,
                           int count_uni, char *err, size_t errlen) {
    char tname[256], aname[256], oname[256];
    int rc;
    if (w != 1 && w != 2 && w != 4) return ig_fail(err, errlen, IG_ERR_ARG, "token_width %d is not 1, 2 or 4", w);
    if (vocab == 0 || vocab > ig_sep_for_width(w))
        return ig_fail(err, errlen, IG_ERR_ARG, "vocab_size %u does not fit %d-byte tokens (at most %u ids)", vocab, w,
                       ig_sep_for_width(w));
    if (strlen(suffix) > 200 || strchr(suffix, '/'))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: bad shard suffix", dir);
    snprintf(tname, sizeof tname, "tokenized%s", suffix);
    snprintf(aname, sizeof aname, "table%s", suffix);
    snprintf(oname, sizeof oname, "offset%s", suffix);
    s->official = 1;
    s->official_docs = 1;
    const int shift = w == 1 ? 0 : w == 2 ? 1 : 2;

    if ((rc = map_raw(s, &s->tok_map, dirfd, dir, tname, err, errlen))) return rc;
    size_t ds = s->tok_map.size;
    if (ds % (size_t)w)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: %zu bytes is not a whole number of %d-byte tokens", dir, tname,
                       ds, w);
    int64_t tok_cnt = (int64_t)(ds / (size_t)w);
    if (tok_cnt < 1 || (uint64_t)tok_cnt > ((uint64_t)1 << 48))
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: implausible size", dir, tname);
    s->tokens = s->tok_map.base + w; /* virtual position v = file position v + 1 */
    s->total_len = tok_cnt;
    s->tok_end = tok_cnt - 1;
    uint32_t first = 0; /* (little-endian host) */
    memcpy(&first, s->tok_map.base, (size_t)w);
    if (first != ig_sep_for_width(w))
        return ig_fail(err, errlen, IG_ERR_FORMAT,
                       "%s/%s: does not start with a document separator (wrong token width? this file needs %d-byte "
                       "tokens to be infini-gram's)", dir, tname, w);

    if ((rc = map_raw(s, &s->docs_map, dirfd, dir, oname, err, errlen))) return rc;
    if (s->docs_map.size % 8)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: %zu bytes is not a whole number of u64 offsets", dir, oname,
                       s->docs_map.size);
    s->docs = (const uint64_t *)s->docs_map.base;
    s->doc_shift = shift;
    s->num_docs = (int64_t)(s->docs_map.size / 8);
    if (s->num_docs > tok_cnt)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: more documents than tokens", dir, oname);
    for (int64_t d = 0; d < s->num_docs; d++) { /* O(documents): offsets of separators, increasing */
        uint64_t o = s->docs[d];
        if ((d == 0 && o != 0) || (d > 0 && o <= s->docs[d - 1]) || o >= ds || o % (uint64_t)w)
            return ig_fail(err, errlen, IG_ERR_FORMAT,
                           "%s/%s: offset %lld (%llu) is not an increasing, aligned byte offset into %s", dir, oname,
                           (long long)d, (unsigned long long)o, tname);
        if (ig_tok(s, w, (int64_t)(o >> shift) - 1) != ig_sep_for_width(w))
            return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: document %lld does not start at a separator of %s", dir,
                           oname, (long long)d, tname);
    }
    s->num_tokens = tok_cnt - s->num_docs;

    if ((rc = map_raw(s, &s->sa_map, dirfd, dir, aname, err, errlen))) return rc;
    size_t ts = s->sa_map.size;
    if (ts % (size_t)tok_cnt || ts / (size_t)tok_cnt < 1 || ts / (size_t)tok_cnt > 8)
        return ig_fail(err, errlen, IG_ERR_FORMAT,
                       "%s/%s: %zu bytes is not 1 to 8 bytes per token of %s (%lld tokens): a table for other tokens", dir,
                       aname, ts, tname, (long long)tok_cnt);
    s->sa = s->sa_map.base;
    s->sa_width = (int)(ts / (size_t)tok_cnt);
    s->sa_mask = s->sa_width == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * s->sa_width)) - 1);
    s->sa_fast_n = ts >= 8 ? (int64_t)((ts - 8) / (size_t)s->sa_width) + 1 : 0;
    if (s->sa_fast_n > s->num_tokens) s->sa_fast_n = s->num_tokens;
    s->sa_shift = shift;
    s->sa_bias = 1;
    /* The separators' suffixes come last: the rank after the tokens' must start with one. */
    if (s->num_tokens < tok_cnt && ig_tok(s, w, ig_sa(s, s->num_tokens)) != ig_sep_for_width(w))
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: rank %lld should start with a separator", dir, aname,
                       (long long)s->num_tokens);
    return count_uni ? count_unigram(s, w, vocab, dir, tname, err, errlen) : IG_OK;
}
