/* index.c - open, validate and memory-map index shards; close them. Validation costs
   O(distinct tokens + documents) per shard: sizes and headers are checked, content is not
   scanned (queries clamp every pointer they read instead). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "ntd_cache.h"
#include "official.h"
#include "shard_pool.h"

/* Map file `name` of the shard directory dirfd (named `dir` in messages); see files.c. */
static int map_file(const ig_shard *s, ig_map *m, int dirfd, const char *dir, const char *name, char *err, size_t errlen) {
    int fd, rc;
    struct stat st;
    if ((rc = ig_open_index_file(dirfd, dir, name, s->links, &fd, &st, err, errlen))) return rc;
    if ((size_t)st.st_size < IG_HEADER_SIZE) {
        close(fd);
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: truncated (%lld bytes, header needs %d)",
                       dir, name, (long long)st.st_size, IG_HEADER_SIZE);
    }
    /* Small files (docs, unigram) are read whole at open: one readahead instead of a page fault
       per 4-64 KB, which on a cold cache cost ~90 ms for a 100M-token index. Big files are
       read where the queries go. */
    if ((size_t)st.st_size <= IG_SMALL_FILE) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return ig_fail(err, errlen, IG_ERR_IO, "%s/%s: mmap failed (%s)", dir, name, strerror(errno));
    if ((size_t)st.st_size > IG_SMALL_FILE) (void)madvise(p, (size_t)st.st_size, MADV_RANDOM);
    m->base = p;
    m->size = (size_t)st.st_size;
    return IG_OK;
}

void ig_will_read(const ig_map *m, const void *p, size_t n) {
    const size_t page = 4096, min_bytes = 32 * 1024; /* shorter reads: a few faults cost less */
    if (n < min_bytes || !m->base || (const uint8_t *)p < m->base) return;
    size_t a = (size_t)((const uint8_t *)p - m->base);
    if (a >= m->size) return;
    size_t b = a + n < m->size ? a + n : m->size;
    a &= ~(page - 1);
    (void)madvise((void *)(m->base + a), b - a, MADV_WILLNEED);
}

static void unmap_file(ig_map *m) {
    if (m->base) munmap((void *)m->base, m->size);
    m->base = NULL;
}

/* Check magic, version, element width range and the exact file size for `count` elements. */
static int check_header(const ig_map *m, const char *dir, const char *name, const char *magic,
                        size_t padding, ig_header *h, char *err, size_t errlen) {
    memcpy(h, m->base, sizeof *h);
    if (memcmp(h->magic, magic, 8) != 0)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: bad magic (not an infinigram_hf %s file)", dir, name, name);
    if (h->version != IG_FORMAT_VERSION)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: format version %u, this build reads %d",
                       dir, name, h->version, IG_FORMAT_VERSION);
    if (h->width == 0 || h->width > 16)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: bad element width %u", dir, name, h->width);
    if (h->count > ((uint64_t)1 << 56) / h->width)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: element count %llu is implausible", dir, name,
                       (unsigned long long)h->count);
    uint64_t want = IG_HEADER_SIZE + h->count * h->width + padding;
    if (want != m->size)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: size %zu bytes does not match its header (%llu expected): truncated or corrupt",
                       dir, name, m->size, (unsigned long long)want);
    return IG_OK;
}

void ig_close_shard(ig_shard *s) {
    unmap_file(&s->tok_map);
    unmap_file(&s->sa_map);
    unmap_file(&s->docs_map);
    unmap_file(&s->uni_map);
    free(s->uni_start);
    s->uni_start = NULL;
    free(s->uni_rank);
    s->uni_rank = NULL;
    free(s->uni_owned);
    s->uni_owned = NULL;
    free(s->uni_key_rank);
    s->uni_key_rank = NULL;
    ig_ntc_close(s);
}

/* Ask the kernel for every page open() will read, all at once: on a cold cache each page fault
   is a disk round trip (5-10 ms measured on a shared VM), and these reads then overlap. */
static void prefetch_shard(int dirfd, int links) {
    static const char *const names[] = {"tokens.bin", "sa.bin", "docs.bin", "unigram.bin", "ntdcache.bin"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        int fd;
        struct stat st;
        if (ig_open_index_file(dirfd, "", names[i], 1 | links, &fd, &st, NULL, 0) || fd < 0) continue;
        if ((size_t)st.st_size <= IG_SMALL_FILE) {
            (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
        } else { /* header; and the last page (the final separator, the last doc offset) */
            (void)posix_fadvise(fd, 0, 4096, POSIX_FADV_WILLNEED);
            (void)posix_fadvise(fd, st.st_size - 4096, 4096, POSIX_FADV_WILLNEED);
        }
        close(fd);
    }
}

/* The first suffix-array rank of every first token, from unigram.bin's counts (each already
   checked: positive, and all together exactly num_tokens, so every rank is in range). A dense
   table (O(1) per query) costs 8 bytes per vocabulary id, so it is built only where the shard
   holds about as many tokens as the vocabulary has ids; otherwise the ranks of the tokens that
   occur (8 bytes per unigram.bin entry) are binary-searched. Memory at open thus follows what
   the files hold: a 2^24 vocabulary cost 128 MiB per shard even for a shard of 20 tokens. */
static int build_first_token_ranks(ig_shard *s, uint32_t vocab, char *err, size_t errlen) {
    if (vocab <= (1u << 24) && (int64_t)vocab <= s->total_len + (1 << 16)) {
        s->uni_start = malloc(((size_t)vocab + 1) * sizeof(int64_t));
        if (!s->uni_start) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
        int64_t j = 0, acc = 0;
        for (uint32_t v = 0; v <= vocab; v++) {
            s->uni_start[v] = acc;
            if (j < s->n_uni && s->uni[2 * j] == v) acc += (int64_t)s->uni[2 * j++ + 1];
        }
        return IG_OK;
    }
    s->uni_rank = malloc(((size_t)s->n_uni + 1) * sizeof(int64_t));
    if (!s->uni_rank) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    s->uni_rank[0] = 0;
    for (int64_t j = 0; j < s->n_uni; j++) s->uni_rank[j + 1] = s->uni_rank[j] + (int64_t)s->uni[2 * j + 1];
    return IG_OK;
}

static int load_unigram(ig_shard *s, int dirfd, const char *dir, int token_width, uint32_t vocab_size, char *err,
                        size_t errlen);

static int open_shard(ig_shard *s, int dirfd, const char *dir, int *token_width, uint32_t *vocab, char *err,
                      size_t errlen) {
    ig_header ht, hs, hd;
    int rc;
    prefetch_shard(dirfd, s->links);
    if ((rc = map_file(s, &s->tok_map, dirfd, dir, "tokens.bin", err, errlen))) return rc;
    if ((rc = check_header(&s->tok_map, dir, "tokens.bin", "IGHF-TOK", 0, &ht, err, errlen))) return rc;
    if (ht.width != 1 && ht.width != 2 && ht.width != 4)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/tokens.bin: token width %u is not 1, 2 or 4", dir, ht.width);
    if (ht.aux1 == 0 || ht.aux1 > ig_sep_for_width((int)ht.width))
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/tokens.bin: vocab size %llu does not fit width %u", dir,
                       (unsigned long long)ht.aux1, ht.width);
    if (*token_width == 0) {
        *token_width = (int)ht.width;
        *vocab = (uint32_t)ht.aux1;
    } else if (*token_width != (int)ht.width || *vocab != (uint32_t)ht.aux1) {
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/tokens.bin: token width/vocab (%u/%llu) differ from the first shard's (%d/%u)",
                       dir, ht.width, (unsigned long long)ht.aux1, *token_width, *vocab);
    }
    s->tokens = s->tok_map.base + IG_HEADER_SIZE;
    if (ht.aux2 > ht.count || ht.count > (uint64_t)IG_MAX_SHARD_TOKENS) /* (checked as read: unsigned) */
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/tokens.bin: %llu documents in %llu tokens is impossible", dir,
                       (unsigned long long)ht.aux2, (unsigned long long)ht.count);
    s->total_len = (int64_t)ht.count;
    s->num_docs = (int64_t)ht.aux2;
    s->num_tokens = s->total_len - s->num_docs;
    s->tok_end = s->total_len;
    uint32_t sep = ig_sep_for_width(*token_width);
    if (s->total_len > 0 && ig_tok(s, *token_width, s->total_len - 1) != sep)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/tokens.bin: does not end with a document separator", dir);

    if ((rc = map_file(s, &s->sa_map, dirfd, dir, "sa.bin", err, errlen))) return rc;
    if ((rc = check_header(&s->sa_map, dir, "sa.bin", "IGHF-SA\0", 8, &hs, err, errlen))) return rc;
    if (hs.width > 8 || hs.count != (uint64_t)s->num_tokens || hs.aux1 != (uint64_t)s->total_len)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/sa.bin: header (%llu pointers of %u bytes over %llu tokens) does not match tokens.bin",
                       dir, (unsigned long long)hs.count, hs.width, (unsigned long long)hs.aux1);
    s->sa = s->sa_map.base + IG_HEADER_SIZE;
    s->sa_width = (int)hs.width;
    s->sa_mask = hs.width == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * hs.width)) - 1);
    s->sa_fast_n = s->num_tokens;

    if ((rc = map_file(s, &s->docs_map, dirfd, dir, "docs.bin", err, errlen))) return rc;
    if ((rc = check_header(&s->docs_map, dir, "docs.bin", "IGHF-DOC", 0, &hd, err, errlen))) return rc;
    if (hd.width != 8 || hd.count != (uint64_t)s->num_docs + 1 || hd.aux1 != (uint64_t)s->total_len)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/docs.bin: header does not match tokens.bin", dir);
    s->docs = (const uint64_t *)(s->docs_map.base + IG_HEADER_SIZE);
    if (s->docs[0] != 0 || s->docs[s->num_docs] != (uint64_t)s->total_len)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/docs.bin: offsets do not span the token array", dir);

    return load_unigram(s, dirfd, dir, *token_width, *vocab, err, errlen);
}

/* unigram.bin (checked against the shard's sizes), the first-token ranks built from it, and the
   optional ntdcache.bin, from the directory dirfd (our shard's, or an official shard's sidecar). */
static int load_unigram(ig_shard *s, int dirfd, const char *dir, int token_width, uint32_t vocab_size, char *err,
                        size_t errlen) {
    ig_header hu;
    int rc;
    if ((rc = map_file(s, &s->uni_map, dirfd, dir, "unigram.bin", err, errlen))) return rc;
    if ((rc = check_header(&s->uni_map, dir, "unigram.bin", "IGHF-UNI", 0, &hu, err, errlen))) return rc;
    if (hu.width != 16 || hu.aux1 != (uint64_t)s->num_tokens || hu.count > vocab_size)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/unigram.bin: header does not match tokens.bin", dir);
    s->uni = (const uint64_t *)(s->uni_map.base + IG_HEADER_SIZE);
    s->n_uni = (int64_t)hu.count;
    /* Each count is checked against the tokens not yet counted, so the running sum can neither
       pass num_tokens nor wrap around 2^64 (forged counts that wrapped to num_tokens passed a
       plain sum check, and the ranks built from them sent queries outside the mapping). */
    uint64_t sum = 0;
    for (int64_t i = 0; i < s->n_uni; i++) {
        uint64_t t = s->uni[2 * i], c = s->uni[2 * i + 1];
        if (t >= vocab_size || (i > 0 && t <= s->uni[2 * i - 2]))
            return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/unigram.bin: entry %lld is out of order or out of range", dir, (long long)i);
        if (c == 0 || c > (uint64_t)s->num_tokens - sum)
            return ig_fail(err, errlen, IG_ERR_FORMAT,
                           "%s/unigram.bin: entry %lld has count %llu, not between 1 and the %llu tokens left to count",
                           dir, (long long)i, (unsigned long long)c, (unsigned long long)((uint64_t)s->num_tokens - sum));
        sum += c;
    }
    if (sum != (uint64_t)s->num_tokens)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/unigram.bin: counts sum to %llu, not %lld tokens", dir,
                       (unsigned long long)sum, (long long)s->num_tokens);
    if ((rc = build_first_token_ranks(s, vocab_size, err, errlen))) return rc;
    return ig_ntc_open(s, dirfd, dir, token_width, vocab_size, err, errlen); /* optional file */
}

/* An official shard (opened without counting its unigram) takes the sidecar in dirfd: our
   sa.bin over the same positions (each document followed by a separator, as the official shard
   is read), ordered by id; unigram.bin; ntdcache.bin if there. The official table is unmapped. */
static int attach_sidecar(ig_shard *s, int dirfd, const char *dir, int token_width, uint32_t vocab, char *err,
                          size_t errlen) {
    ig_header hs;
    int rc;
    unmap_file(&s->sa_map);
    if ((rc = map_file(s, &s->sa_map, dirfd, dir, "sa.bin", err, errlen))) return rc;
    if ((rc = check_header(&s->sa_map, dir, "sa.bin", "IGHF-SA\0", 8, &hs, err, errlen))) return rc;
    if (hs.width > 8 || hs.count != (uint64_t)s->num_tokens || hs.aux1 != (uint64_t)s->total_len)
        return ig_fail(err, errlen, IG_ERR_FORMAT,
                       "%s/sa.bin: header (%llu pointers of %u bytes over %llu tokens) does not match the official "
                       "shard (%lld tokens, %lld with separators): a stale sidecar, prepare it again",
                       dir, (unsigned long long)hs.count, hs.width, (unsigned long long)hs.aux1,
                       (long long)s->num_tokens, (long long)s->total_len);
    s->sa = s->sa_map.base + IG_HEADER_SIZE;
    s->sa_width = (int)hs.width;
    s->sa_mask = hs.width == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * hs.width)) - 1);
    s->sa_fast_n = s->num_tokens;
    s->sa_shift = 0;
    s->sa_bias = 0;
    s->official = 0; /* ordered as ours from here on; official_docs stays */
    return load_unigram(s, dirfd, dir, token_width, vocab, err, errlen);
}

int ig_open_mixed_at(ig_index **out, const int *shard_dirfds, const char *const *shard_names,
                     const char *const *official_suffixes, int n_shards, int token_width, uint32_t vocab_size,
                     char *err, size_t errlen) {
    return ig_open_official_at(out, shard_dirfds, shard_names, official_suffixes, NULL, NULL, n_shards, token_width,
                               vocab_size, 0, err, errlen);
}

int ig_open_official_at(ig_index **out, const int *shard_dirfds, const char *const *shard_names,
                        const char *const *official_suffixes, const int *sidecar_dirfds,
                        const char *const *sidecar_names, int n_shards, int token_width, uint32_t vocab_size,
                        int flags, char *err, size_t errlen) {
    if (!out || !shard_dirfds || !shard_names || n_shards <= 0) return ig_fail(err, errlen, IG_ERR_ARG, "no shards given");
    *out = NULL;
    ig_index *ix = calloc(1, sizeof *ix);
    if (!ix) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    ix->shards = calloc((size_t)n_shards, sizeof(ig_shard));
    if (!ix->shards) {
        free(ix);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    ix->n_shards = n_shards;
    ix->token_width = token_width;
    ix->vocab_size = vocab_size;
    for (int i = 0; i < n_shards; i++) {
        ix->shards[i].links = (flags & IG_OPEN_HUB_LINKS) ? IG_LINKS_HUB : 0;
        int off = official_suffixes && official_suffixes[i];
        int side = off && sidecar_dirfds && sidecar_dirfds[i] >= 0;
        int rc = off ? ig_official_open_shard(&ix->shards[i], shard_dirfds[i], shard_names[i], official_suffixes[i],
                                              ix->token_width, ix->vocab_size, !side, err, errlen)
                     : open_shard(&ix->shards[i], shard_dirfds[i], shard_names[i], &ix->token_width,
                                  &ix->vocab_size, err, errlen);
        if (!rc && side)
            rc = attach_sidecar(&ix->shards[i], sidecar_dirfds[i],
                                sidecar_names && sidecar_names[i] ? sidecar_names[i] : "sidecar", ix->token_width,
                                ix->vocab_size, err, errlen);
        if (rc) {
            ig_close(ix);
            return rc;
        }
        ix->num_tokens += (uint64_t)ix->shards[i].num_tokens;
        ix->num_docs += (uint64_t)ix->shards[i].num_docs;
    }
    ix->separator = ig_sep_for_width(ix->token_width);
    ix->pool = ig_shard_pool_new(n_shards); /* (no threads until a cold step needs them) */
    *out = ix;
    return IG_OK;
}

int ig_open_at(ig_index **out, const int *shard_dirfds, const char *const *shard_names, int n_shards, char *err,
               size_t errlen) {
    return ig_open_mixed_at(out, shard_dirfds, shard_names, NULL, n_shards, 0, 0, err, errlen);
}

int ig_index_has_official(const ig_index *ix) {
    for (int i = 0; ix && i < ix->n_shards; i++)
        if (ix->shards[i].official) return 1;
    return 0;
}

int ig_open(ig_index **out, const char *const *shard_dirs, int n_shards, char *err, size_t errlen) {
    if (!out || !shard_dirs || n_shards <= 0) return ig_fail(err, errlen, IG_ERR_ARG, "no shards given");
    *out = NULL;
    int *fds = malloc((size_t)n_shards * sizeof *fds);
    if (!fds) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    int rc = IG_OK, opened = 0;
    for (; opened < n_shards && !rc; opened++) { /* (the caller's paths: links in them are theirs) */
        fds[opened] = open(shard_dirs[opened], O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
        if (fds[opened] < 0)
            rc = errno == ENOENT || errno == ENOTDIR
                     ? ig_fail(err, errlen, IG_ERR_FORMAT, "%s: missing or not a directory", shard_dirs[opened])
                     : ig_fail(err, errlen, IG_ERR_IO, "%s: cannot open (%s)", shard_dirs[opened], strerror(errno));
    }
    if (!rc) rc = ig_open_at(out, fds, shard_dirs, n_shards, err, errlen);
    for (int i = 0; i < opened; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
    return rc;
}

void ig_close(ig_index *ix) {
    if (!ix) return;
    ig_shard_pool_free(ix->pool); /* (its threads are stopped and joined first) */
    for (int i = 0; i < ix->n_shards; i++) ig_close_shard(&ix->shards[i]);
    free(ix->shards);
    free(ix);
}

void ig_get_info(const ig_index *ix, ig_info *info) {
    info->token_width = ix->token_width;
    info->vocab_size = ix->vocab_size;
    info->separator = ix->separator;
    info->n_shards = ix->n_shards;
    info->num_tokens = ix->num_tokens;
    info->num_docs = ix->num_docs;
}

int ig_shard_info(const ig_index *ix, int shard, uint64_t *num_tokens, uint64_t *total_len,
                  uint64_t *num_docs, int *sa_width) {
    if (!ix || shard < 0 || shard >= ix->n_shards) return IG_ERR_ARG;
    const ig_shard *s = &ix->shards[shard];
    *num_tokens = (uint64_t)s->num_tokens;
    *total_len = (uint64_t)s->total_len;
    *num_docs = (uint64_t)s->num_docs;
    *sa_width = s->sa_width;
    return IG_OK;
}
