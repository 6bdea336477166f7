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

static int map_file(ig_map *m, const char *dir, const char *name, char *err, size_t errlen) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: path too long", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ig_fail(err, errlen, IG_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s: not a regular file", path);
    }
    if ((size_t)st.st_size < IG_HEADER_SIZE) {
        close(fd);
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s: truncated (%lld bytes, header needs %d)",
                       path, (long long)st.st_size, IG_HEADER_SIZE);
    }
    /* Small files (docs, unigram) are read whole at open: one readahead instead of a page fault
       per 4-64 KB, which on a cold cache cost ~90 ms for a 100M-token index. Big files are
       read where the queries go. */
    if (st.st_size <= ((off_t)8 << 20)) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return ig_fail(err, errlen, IG_ERR_IO, "%s: mmap failed (%s)", path, strerror(errno));
    m->base = p;
    m->size = (size_t)st.st_size;
    return IG_OK;
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

static void close_shard(ig_shard *s) {
    unmap_file(&s->tok_map);
    unmap_file(&s->sa_map);
    unmap_file(&s->docs_map);
    unmap_file(&s->uni_map);
    free(s->uni_start);
    s->uni_start = NULL;
    ig_ntc_close(s);
}

/* Ask the kernel for every page open() will read, all at once: on a cold cache each page fault
   is a disk round trip (5-10 ms measured on a shared VM), and these reads then overlap. */
static void prefetch_shard(const char *dir) {
    static const char *const names[] = {"tokens.bin", "sa.bin", "docs.bin", "unigram.bin", "ntdcache.bin"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) continue;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            if (st.st_size <= ((off_t)8 << 20)) {
                (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
            } else { /* header; and the last page (the final separator, the last doc offset) */
                (void)posix_fadvise(fd, 0, 4096, POSIX_FADV_WILLNEED);
                (void)posix_fadvise(fd, st.st_size - 4096, 4096, POSIX_FADV_WILLNEED);
            }
        }
        close(fd);
    }
}

static int open_shard(ig_shard *s, const char *dir, int *token_width, uint32_t *vocab, char *err,
                      size_t errlen) {
    ig_header ht, hs, hd, hu;
    int rc;
    prefetch_shard(dir);
    if ((rc = map_file(&s->tok_map, dir, "tokens.bin", err, errlen))) return rc;
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
    uint32_t sep = ig_sep_for_width(*token_width);
    if (s->total_len > 0 && ig_tok(s, *token_width, s->total_len - 1) != sep)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/tokens.bin: does not end with a document separator", dir);

    if ((rc = map_file(&s->sa_map, dir, "sa.bin", err, errlen))) return rc;
    if ((rc = check_header(&s->sa_map, dir, "sa.bin", "IGHF-SA\0", 8, &hs, err, errlen))) return rc;
    if (hs.width > 8 || hs.count != (uint64_t)s->num_tokens || hs.aux1 != (uint64_t)s->total_len)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/sa.bin: header (%llu pointers of %u bytes over %llu tokens) does not match tokens.bin",
                       dir, (unsigned long long)hs.count, hs.width, (unsigned long long)hs.aux1);
    s->sa = s->sa_map.base + IG_HEADER_SIZE;
    s->sa_width = (int)hs.width;
    s->sa_mask = hs.width == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * hs.width)) - 1);

    if ((rc = map_file(&s->docs_map, dir, "docs.bin", err, errlen))) return rc;
    if ((rc = check_header(&s->docs_map, dir, "docs.bin", "IGHF-DOC", 0, &hd, err, errlen))) return rc;
    if (hd.width != 8 || hd.count != (uint64_t)s->num_docs + 1 || hd.aux1 != (uint64_t)s->total_len)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/docs.bin: header does not match tokens.bin", dir);
    s->docs = (const uint64_t *)(s->docs_map.base + IG_HEADER_SIZE);
    if (s->docs[0] != 0 || s->docs[s->num_docs] != (uint64_t)s->total_len)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/docs.bin: offsets do not span the token array", dir);

    if ((rc = map_file(&s->uni_map, dir, "unigram.bin", err, errlen))) return rc;
    if ((rc = check_header(&s->uni_map, dir, "unigram.bin", "IGHF-UNI", 0, &hu, err, errlen))) return rc;
    if (hu.width != 16 || hu.aux1 != (uint64_t)s->num_tokens || hu.count > *vocab)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/unigram.bin: header does not match tokens.bin", dir);
    s->uni = (const uint64_t *)(s->uni_map.base + IG_HEADER_SIZE);
    s->n_uni = (int64_t)hu.count;
    uint64_t sum = 0;
    for (int64_t i = 0; i < s->n_uni; i++) {
        if (s->uni[2 * i] >= *vocab || (i > 0 && s->uni[2 * i] <= s->uni[2 * i - 2]) || s->uni[2 * i + 1] == 0)
            return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/unigram.bin: entry %lld is out of order or out of range", dir, (long long)i);
        sum += s->uni[2 * i + 1];
    }
    if (sum != (uint64_t)s->num_tokens)
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/unigram.bin: counts sum to %llu, not %lld tokens", dir,
                       (unsigned long long)sum, (long long)s->num_tokens);
    /* Dense first-token ranks make a 1-token range O(1); only for vocabularies that fit. */
    if (*vocab <= (1u << 24)) {
        s->uni_start = malloc(((size_t)*vocab + 1) * sizeof(int64_t));
        if (!s->uni_start) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
        int64_t j = 0, acc = 0;
        for (uint32_t v = 0; v <= *vocab; v++) {
            s->uni_start[v] = acc;
            if (j < s->n_uni && s->uni[2 * j] == v) acc += (int64_t)s->uni[2 * j++ + 1];
        }
    }
    return ig_ntc_open(s, dir, *token_width, *vocab, err, errlen); /* optional file */
}

int ig_open(ig_index **out, const char *const *shard_dirs, int n_shards, char *err, size_t errlen) {
    if (!out || !shard_dirs || n_shards <= 0) return ig_fail(err, errlen, IG_ERR_ARG, "no shards given");
    *out = NULL;
    ig_index *ix = calloc(1, sizeof *ix);
    if (!ix) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    ix->shards = calloc((size_t)n_shards, sizeof(ig_shard));
    if (!ix->shards) {
        free(ix);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    ix->n_shards = n_shards;
    for (int i = 0; i < n_shards; i++) {
        int rc = open_shard(&ix->shards[i], shard_dirs[i], &ix->token_width, &ix->vocab_size, err, errlen);
        if (rc) {
            ig_close(ix);
            return rc;
        }
        ix->num_tokens += (uint64_t)ix->shards[i].num_tokens;
        ix->num_docs += (uint64_t)ix->shards[i].num_docs;
    }
    ix->separator = ig_sep_for_width(ix->token_width);
    *out = ix;
    return IG_OK;
}

void ig_close(ig_index *ix) {
    if (!ix) return;
    for (int i = 0; i < ix->n_shards; i++) close_shard(&ix->shards[i]);
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
