/* writer.c - build one shard: collect documents, run SA-IS, write the four binary files.
 * Memory at peak: the token array (width bytes per token) + the int32 suffix array + what
 * SA-IS needs on top (see sais.c) + one 1 MiB output buffer. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "common.h"
#include "async_write.h"
#include "ntd_cache.h"
#include "prefault.h"
#include "sais.h"

struct ig_writer {
    char *dir;
    int width;
    uint32_t vocab_size, sep;
    uint8_t *tokens;
    int64_t len, cap;
    uint64_t *docs; /* document start offsets */
    int64_t n_docs, docs_cap;
    int finished;
    int doc_open; /* a document added in parts (ig_writer_add_part_w) is not ended yet */
    int64_t ntc_min_cost; /* ntdcache.bin threshold (0 = do not write it) */
    /* tokens.bin is written as documents arrive, so the disk works while the corpus streams
       in and SA-IS runs; -1 = not (yet) streaming: finish writes it whole */
    int tok_fd;
    int tok_stream_failed;
    int64_t tok_written, tok_synced; /* tokens in the file; tokens handed to writeback */
    ig_awriter *tok_aw; /* writes tokens.bin on a thread (only with tok_mem: tokens never move) */
    /* The token array and the suffix array live in address space reserved for the largest
       shard, their pages faulted in by background threads while documents arrive (prefault.c).
       NULL: not available, tokens are realloc'd as they grow and SA malloc'd at finish. */
    ig_prefault *tok_mem, *sa_mem;
    int mem_tried;
};

int64_t ig_writer_peak_bytes(int64_t total_len, int token_width) {
    /* tokens + int32 SA + SA-IS workspace (bounded by n/2 int32) + buckets and output buffer */
    return total_len * (token_width + 4) + total_len * 2 + ((int64_t)1 << 22);
}

int ig_writer_new(ig_writer **out, const char *dir, int token_width, uint32_t vocab_size, char *err,
                  size_t errlen) {
    if (!out || !dir) return ig_fail(err, errlen, IG_ERR_ARG, "NULL argument");
    if (token_width != 1 && token_width != 2 && token_width != 4)
        return ig_fail(err, errlen, IG_ERR_ARG, "token width must be 1, 2 or 4 bytes, not %d", token_width);
    uint32_t sep = ig_sep_for_width(token_width);
    if (vocab_size == 0 || vocab_size > sep || (token_width == 4 && vocab_size > sep - 1))
        return ig_fail(err, errlen, IG_ERR_ARG, "vocab size %u does not fit %d-byte tokens with a separator",
                       vocab_size, token_width);
    ig_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    w->width = token_width;
    w->vocab_size = vocab_size;
    w->sep = sep;
    w->ntc_min_cost = IG_NTC_DEFAULT_MIN_COST;
    w->tok_fd = -1;
    *out = w;
    return IG_OK;
}

static void tok_stream_drop(ig_writer *w);

void ig_writer_free(ig_writer *w) {
    if (!w) return;
    if (w->tok_aw) (void)ig_aw_finish(w->tok_aw); /* (before the file and the tokens go) */
    if (w->tok_fd >= 0) tok_stream_drop(w); /* never finished: remove the partial tokens.bin */
    ig_prefault_free(w->sa_mem);
    if (w->tok_mem) ig_prefault_free(w->tok_mem);
    else free(w->tokens);
    free(w->dir);
    free(w->docs);
    free(w);
}

int ig_writer_set_ntd_cache(ig_writer *w, int64_t min_cost) {
    if (!w || w->finished) return IG_ERR_ARG;
    w->ntc_min_cost = min_cost > 0 ? min_cost : 0;
    return IG_OK;
}

int64_t ig_writer_total_len(const ig_writer *w) { return w ? w->len : 0; }
int64_t ig_writer_num_docs(const ig_writer *w) { return w ? w->n_docs : 0; }

static int grow(void **buf, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) c += c / 2;
    void *p = realloc(*buf, (size_t)c * elem);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* SA-IS reads the token array at random, which wants huge pages; asking for them while it
   fills (pages not yet touched) spares collapsing it into huge pages later. A hint only. */
static void advise_hugepages(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t H = (uintptr_t)1 << 21;
    uintptr_t a = ((uintptr_t)p + H - 1) & ~(H - 1), e = ((uintptr_t)p + bytes) & ~(H - 1);
    if (bytes >= ((size_t)4 << 20) && e > a) (void)madvise((void *)a, (size_t)(e - a), MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

static void put_tok(ig_writer *w, int64_t i, uint32_t v) {
    switch (w->width) {
    case 1: w->tokens[i] = (uint8_t)v; break;
    case 2: { uint16_t x = (uint16_t)v; memcpy(w->tokens + 2 * i, &x, 2); break; }
    default: memcpy(w->tokens + 4 * i, &v, 4);
    }
}

/* Id i of an input array of id_width-byte ids. */
static inline uint32_t id_at(const void *ids, int id_width, int64_t i) {
    if (id_width == 1) return ((const uint8_t *)ids)[i];
    if (id_width == 2) return ((const uint16_t *)ids)[i];
    return ((const uint32_t *)ids)[i];
}

/* Largest id in ids[a, b): one tight loop per width (vectorized by the compiler). */
static uint32_t max_id(const void *ids, int id_width, int64_t a, int64_t b) {
    uint32_t mx = 0;
    if (id_width == 1) for (int64_t i = a; i < b; i++) mx = id_at(ids, 1, i) > mx ? id_at(ids, 1, i) : mx;
    else if (id_width == 2) for (int64_t i = a; i < b; i++) mx = id_at(ids, 2, i) > mx ? id_at(ids, 2, i) : mx;
    else for (int64_t i = a; i < b; i++) mx = id_at(ids, 4, i) > mx ? id_at(ids, 4, i) : mx;
    return mx;
}

/* Copy ids[a, b) to the token array at w->len: memcpy when the widths agree. */
static void copy_ids(ig_writer *w, const void *ids, int id_width, int64_t a, int64_t b) {
    if (id_width == w->width) {
        memcpy(w->tokens + (size_t)w->len * (size_t)w->width, (const uint8_t *)ids + (size_t)a * (size_t)id_width,
               (size_t)(b - a) * (size_t)id_width);
    } else {
        for (int64_t i = a; i < b; i++) put_tok(w, w->len + (i - a), id_at(ids, id_width, i));
    }
    w->len += b - a;
}

static int tok_stream(ig_writer *w);

/* Every id of ids[a, b) must be in the vocabulary (names the first one that is not). */
static int writer_check_ids(const ig_writer *w, const void *ids, int id_width, int64_t a, int64_t b, char *err, size_t errlen) {
    if (a < b && max_id(ids, id_width, a, b) >= w->vocab_size) {
        for (int64_t i = a; i < b; i++) /* name the first bad id */
            if (id_at(ids, id_width, i) >= w->vocab_size)
                return ig_fail(err, errlen, IG_ERR_ARG, "token id %u is outside the vocabulary (size %u)", id_at(ids, id_width, i), w->vocab_size);
    }
    return IG_OK;
}

/* Room for `add` more tokens and `add_docs` more documents. */
static int reserve(ig_writer *w, int64_t add, int64_t add_docs, char *err, size_t errlen) {
    if (w->len + add > IG_MAX_SHARD_TOKENS)
        return ig_fail(err, errlen, IG_ERR_LIMIT, "shard would exceed %lld tokens", (long long)IG_MAX_SHARD_TOKENS);
    /* first documents: reserve for the largest shard there can be (12 GB of address space at
       most: 64-bit systems only) */
    if (!w->mem_tried && add > 0 && sizeof(size_t) >= 8) {
        w->mem_tried = 1;
        if ((w->tok_mem = ig_prefault_new((size_t)IG_MAX_SHARD_TOKENS * (size_t)w->width, 0))) {
            w->tokens = ig_prefault_base(w->tok_mem);
            w->cap = IG_MAX_SHARD_TOKENS;
        }
        w->sa_mem = ig_prefault_new((size_t)IG_MAX_SHARD_TOKENS * sizeof(int32_t), 1);
    }
    int64_t old_cap = w->cap;
    if (grow((void **)&w->tokens, &w->cap, w->len + add, (size_t)w->width) ||
        grow((void **)&w->docs, &w->docs_cap, w->n_docs + add_docs, sizeof(uint64_t)))
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory growing the shard to %lld tokens", (long long)(w->len + add));
    if (w->cap != old_cap && !w->tok_mem) advise_hugepages(w->tokens, (size_t)w->cap * (size_t)w->width);
    return IG_OK;
}

/* After tokens were added: stream them to tokens.bin, fault in pages ahead. */
static void added(ig_writer *w) {
    (void)tok_stream(w);
    /* the next documents' token pages (a quarter of what came so far, at most 16M tokens:
       memory held ahead stays small) and the suffix array of what came so far */
    int64_t ahead = w->len / 4 < ((int64_t)1 << 24) ? w->len / 4 : ((int64_t)1 << 24);
    int64_t tok_want = w->len + ahead < IG_MAX_SHARD_TOKENS ? w->len + ahead : IG_MAX_SHARD_TOKENS;
    ig_prefault_want(w->tok_mem, (size_t)tok_want * (size_t)w->width);
    ig_prefault_want(w->sa_mem, (size_t)w->len * sizeof(int32_t));
}

int ig_writer_add_docs_w(ig_writer *w, const void *ids, int id_width, const int64_t *offsets, int64_t n_docs,
                         char *err, size_t errlen) {
    if (!w || w->finished) return ig_fail(err, errlen, IG_ERR_ARG, "writer is finished");
    if (w->doc_open) return ig_fail(err, errlen, IG_ERR_ARG, "a document added in parts is not ended");
    if (id_width != 1 && id_width != 2 && id_width != 4) return ig_fail(err, errlen, IG_ERR_ARG, "id width must be 1, 2 or 4 bytes, not %d", id_width);
    if (n_docs < 0 || (n_docs > 0 && (!ids || !offsets))) return ig_fail(err, errlen, IG_ERR_ARG, "bad documents");
    int64_t add = 0;
    for (int64_t d = 0; d < n_docs; d++) {
        if (offsets[d + 1] < offsets[d]) return ig_fail(err, errlen, IG_ERR_ARG, "offsets decrease at document %lld", (long long)d);
        add += offsets[d + 1] - offsets[d] + 1;
    }
    int rc = n_docs > 0 ? writer_check_ids(w, ids, id_width, offsets[0], offsets[n_docs], err, errlen) : IG_OK;
    if (!rc) rc = reserve(w, add, n_docs, err, errlen);
    if (rc) return rc;
    for (int64_t d = 0; d < n_docs; d++) {
        w->docs[w->n_docs++] = (uint64_t)w->len;
        copy_ids(w, ids, id_width, offsets[d], offsets[d + 1]);
        put_tok(w, w->len++, w->sep);
    }
    added(w);
    return IG_OK;
}

int ig_writer_add_part_w(ig_writer *w, const void *ids, int id_width, int64_t n, int end_doc, char *err,
                         size_t errlen) {
    if (!w || w->finished) return ig_fail(err, errlen, IG_ERR_ARG, "writer is finished");
    if (id_width != 1 && id_width != 2 && id_width != 4) return ig_fail(err, errlen, IG_ERR_ARG, "id width must be 1, 2 or 4 bytes, not %d", id_width);
    if (n < 0 || (n > 0 && !ids)) return ig_fail(err, errlen, IG_ERR_ARG, "bad document part");
    /* (room for the separator is kept from the first part on, so ending never fails) */
    int rc = writer_check_ids(w, ids, id_width, 0, n, err, errlen);
    if (!rc) rc = reserve(w, n + 1, w->doc_open ? 0 : 1, err, errlen);
    if (rc) return rc;
    if (!w->doc_open) {
        w->docs[w->n_docs++] = (uint64_t)w->len;
        w->doc_open = 1;
    }
    if (n > 0) copy_ids(w, ids, id_width, 0, n); /* (ids may be NULL when n is 0: no memcpy from it) */
    if (end_doc) {
        put_tok(w, w->len++, w->sep);
        w->doc_open = 0;
    }
    added(w);
    return IG_OK;
}

int ig_writer_add_docs(ig_writer *w, const uint32_t *ids, const int64_t *offsets, int64_t n_docs,
                       char *err, size_t errlen) {
    return ig_writer_add_docs_w(w, ids, 4, offsets, n_docs, err, errlen);
}

/* ---------------------------------------------------------------- file output */

typedef struct {
    FILE *f;
    const char *path;
    char *err;
    size_t errlen;
} ig_out;

static int out_open(ig_out *o, char *path, size_t pathlen, const char *dir, const char *name, char *err,
                    size_t errlen) {
    snprintf(path, pathlen, "%s/%s", dir, name);
    o->path = path;
    o->err = err;
    o->errlen = errlen;
    int fd = ig_create_index_file(path); /* a new file, never one a reader may have mapped */
    o->f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!o->f) {
        int e = errno;
        if (fd >= 0) close(fd);
        return ig_fail(err, errlen, IG_ERR_IO, "%s: cannot create (%s)", path, strerror(e));
    }
    return IG_OK;
}

static int out_write(ig_out *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->f) != n)
        return ig_fail(o->err, o->errlen, IG_ERR_IO, "%s: write failed (%s)", o->path, strerror(errno));
    return IG_OK;
}

static int out_close(ig_out *o) {
    int bad = fflush(o->f) != 0 || fsync(fileno(o->f)) != 0;
    int e = errno;
    bad |= fclose(o->f) != 0;
    o->f = NULL;
    if (bad) return ig_fail(o->err, o->errlen, IG_ERR_IO, "%s: write failed (%s)", o->path, strerror(e));
    return IG_OK;
}

static void fill_header(ig_header *h, const char *magic, uint32_t width, uint64_t count, uint64_t aux1,
                        uint64_t aux2) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, magic, 8);
    h->version = IG_FORMAT_VERSION;
    h->width = width;
    h->count = count;
    h->aux1 = aux1;
    h->aux2 = aux2;
}

/* Ask the kernel to start writing [off, off+n) of fd back now, so that the final fsync finds
   it done (the disk works while we compute); a hint only. */
static void start_writeback(int fd, int64_t off, int64_t n) {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    (void)sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd;
    (void)off;
    (void)n;
#endif
}

static void tok_stream_drop(ig_writer *w) {
    char path[4096];
    close(w->tok_fd);
    w->tok_fd = -1;
    snprintf(path, sizeof path, "%s/tokens.bin", w->dir);
    (void)unlink(path);
}

/* Turn streaming tokens.bin off (finish then writes the file whole and reports errors). */
static void tok_stream_fail(ig_writer *w) {
    if (w->tok_aw) (void)ig_aw_finish(w->tok_aw);
    w->tok_aw = NULL;
    if (w->tok_fd >= 0) tok_stream_drop(w);
    w->tok_stream_failed = 1;
}

/* Wait for the queued tokens.bin writes (before finish changes the token array); a failed
   one turns streaming off. */
static void tok_stream_drain(ig_writer *w) {
    if (!w->tok_aw) return;
    int bad = ig_aw_finish(w->tok_aw);
    w->tok_aw = NULL;
    if (bad) tok_stream_fail(w);
}

/* Append the tokens added since the last call to tokens.bin (opened on first use, its header
   written at finish): queued for the writer thread when the token array never moves, else
   written here. Any failure just turns streaming off: finish then writes the file whole and
   reports errors itself. */
static int tok_stream(ig_writer *w) {
    enum { SYNC_EVERY = 1 << 26 }; /* bytes */
    if (w->tok_stream_failed) return -1;
    if (w->tok_fd < 0) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/tokens.bin", w->dir) >= (int)sizeof path ||
            (w->tok_fd = ig_create_index_file(path)) < 0) {
            w->tok_stream_failed = 1;
            return -1;
        }
        if (w->tok_mem) w->tok_aw = ig_aw_new(w->tok_fd); /* (NULL: write here) */
    }
    size_t width = (size_t)w->width;
    const uint8_t *src = w->tokens + (size_t)w->tok_written * width;
    size_t bytes = (size_t)(w->len - w->tok_written) * width;
    int64_t off = IG_HEADER_SIZE + w->tok_written * (int64_t)width;
    if (w->tok_aw ? ig_aw_put(w->tok_aw, src, bytes, off, 0) : ig_pwrite_all(w->tok_fd, src, bytes, off)) {
        tok_stream_fail(w);
        return -1;
    }
    w->tok_written = w->len;
    if (w->tok_aw) return 0; /* (the thread starts writeback itself) */
    if ((w->tok_written - w->tok_synced) * (int64_t)width >= SYNC_EVERY) {
        start_writeback(w->tok_fd, IG_HEADER_SIZE + w->tok_synced * (int64_t)width,
                        (w->tok_written - w->tok_synced) * (int64_t)width);
        w->tok_synced = w->tok_written;
    }
    return 0;
}

/* Complete the streamed tokens.bin: header, then fsync. */
static int tok_stream_close(ig_writer *w, char *err, size_t errlen) {
    ig_header h;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokens.bin", w->dir);
    fill_header(&h, "IGHF-TOK", (uint32_t)w->width, (uint64_t)w->len, w->vocab_size, (uint64_t)w->n_docs);
    int bad = ig_pwrite_all(w->tok_fd, &h, sizeof h, 0) != 0 || fsync(w->tok_fd) != 0;
    int e = errno;
    bad |= close(w->tok_fd) != 0;
    w->tok_fd = -1;
    if (bad) return ig_fail(err, errlen, IG_ERR_IO, "%s: write failed (%s)", path, strerror(e));
    return IG_OK;
}

static int out_header(ig_out *o, const char *magic, uint32_t width, uint64_t count, uint64_t aux1, uint64_t aux2) {
    ig_header h;
    fill_header(&h, magic, width, count, aux1, aux2);
    return out_write(o, &h, sizeof h);
}

static int sa_width_for(int64_t total_len) {
    int p = 1;
    while (p < 8 && (uint64_t)(total_len - 1) >> (8 * p)) p++;
    return p;
}

/* Pack the int32 suffix array into p-byte little-endian pointers, then 8 bytes of padding so
   readers may load 8 bytes at any entry. */
static int write_sa(ig_out *o, const int32_t *sa, int64_t n, int p) {
    enum { CHUNK = 1 << 20 };
    static const uint8_t zero[8] = {0};
    if (p == 4) { /* the int32 array is the file's layout already (little-endian hosts) */
        int rc = out_write(o, sa, (size_t)n * 4);
        return rc ? rc : out_write(o, zero, 8);
    }
    uint8_t *buf = malloc(CHUNK);
    if (!buf) return ig_fail(o->err, o->errlen, IG_ERR_NOMEM, "out of memory");
    size_t fill = 0;
    int rc = IG_OK;
    for (int64_t i = 0; i < n && !rc; i++) {
        uint64_t v = (uint64_t)sa[i];
        memcpy(buf + fill, &v, (size_t)p);
        fill += (size_t)p;
        if (fill + 8 > CHUNK) {
            rc = out_write(o, buf, fill);
            fill = 0;
        }
    }
    if (!rc) rc = out_write(o, buf, fill);
    if (!rc) rc = out_write(o, zero, 8);
    free(buf);
    return rc;
}

/* sa.bin is written while SA-IS runs: its last pass finalizes the suffix array from the end and
   reports each finished range (ig_sais_final), which the writer thread (async_write.c) packs
   and writes at once, so the disk works while the rest is computed. Without a thread, or after
   any failure, it is not streamed: finish then writes the file whole and reports errors. */
typedef struct {
    int fd; /* -1: not streaming */
    int p;
    int64_t n_tok;
    const int32_t *sa;
    ig_awriter *aw;
    int aw_failed; /* a range could not be queued: the file is incomplete */
} sa_stream;

static void sa_stream_range(void *ctx, int64_t lo, int64_t hi) {
    sa_stream *s = ctx;
    if (hi > s->n_tok) hi = s->n_tok; /* ranks past n_tok are the separators' suffixes */
    if (s->fd < 0 || s->aw_failed || lo >= hi) return;
    /* (p == 4: the int32 array is the file's layout already, little-endian hosts) */
    s->aw_failed = ig_aw_put(s->aw, s->sa + lo, (size_t)(hi - lo) * 4, IG_HEADER_SIZE + lo * s->p,
                             s->p == 4 ? 0 : s->p) != 0;
}

/* Open sa.bin, write its header and start the writer thread; on any failure s->fd is -1. */
static void sa_stream_open(sa_stream *s, const ig_writer *w, const int32_t *sa, int p, int64_t n_tok) {
    char path[4096];
    ig_header h;
    *s = (sa_stream){.fd = -1, .p = p, .n_tok = n_tok, .sa = sa};
    if (snprintf(path, sizeof path, "%s/sa.bin", w->dir) >= (int)sizeof path) return;
    s->fd = ig_create_index_file(path);
    fill_header(&h, "IGHF-SA\0", (uint32_t)p, (uint64_t)n_tok, (uint64_t)w->len, 0);
    if (s->fd >= 0 && (ig_pwrite_all(s->fd, &h, sizeof h, 0) || !(s->aw = ig_aw_new(s->fd)))) {
        close(s->fd);
        s->fd = -1;
    }
}

/* Stop streaming: wait for the writer thread; 0 when every range reached the file. Closes
   the file when not. */
static int sa_stream_drain(sa_stream *s) {
    if (s->fd < 0) return -1;
    int bad = ig_aw_finish(s->aw) || s->aw_failed;
    s->aw = NULL;
    if (bad) {
        close(s->fd);
        s->fd = -1;
    }
    return bad ? -1 : 0;
}

/* Complete a streamed sa.bin (padding, fsync); 1 = done, 0 = it was not streamed (write it
   whole), or an error code. */
static int sa_stream_close(sa_stream *s, const ig_writer *w, char *err, size_t errlen) {
    static const uint8_t zero[8] = {0};
    if (sa_stream_drain(s)) return 0; /* incomplete: finish writes it whole */
    int bad = ig_pwrite_all(s->fd, zero, 8, IG_HEADER_SIZE + s->n_tok * s->p) != 0 || fsync(s->fd) != 0;
    int e = errno;
    bad |= close(s->fd) != 0;
    s->fd = -1;
    if (bad) return ig_fail(err, errlen, IG_ERR_IO, "%s/sa.bin: write failed (%s)", w->dir, strerror(e));
    return 1;
}

/* The unigram as (token, count) pairs: SA ranks are grouped by first token, so walk the runs
   (twice: the header needs the number of distinct tokens first). */
static int write_unigram(ig_out *o, const ig_writer *w, const int32_t *sa, int64_t n_tok) {
    ig_shard view = {.tokens = w->tokens, .total_len = w->len, .tok_end = w->len};
    int64_t n_uni = 0;
    for (int64_t i = 0; i < n_tok; n_uni++) i = ig_first_token_run_end(&view, w->width, sa, i, n_tok);
    if (out_header(o, "IGHF-UNI", 16, (uint64_t)n_uni, (uint64_t)n_tok, 0)) return IG_ERR_IO;
    for (int64_t i = 0; i < n_tok;) {
        int64_t end = ig_first_token_run_end(&view, w->width, sa, i, n_tok);
        uint64_t pair[2] = {ig_tok(&view, w->width, sa[i]), (uint64_t)(end - i)};
        if (out_write(o, pair, sizeof pair)) return IG_ERR_IO;
        i = end;
    }
    return IG_OK;
}

/* Separators get the value vocab_size while SA-IS runs: still the largest symbol (so separator
   suffixes sort last and can be dropped), and the alphabet stays [0, vocab_size]. */
static void map_separators(ig_writer *w, uint32_t from, uint32_t to) {
    ig_shard view = {.tokens = w->tokens, .total_len = w->len, .tok_end = w->len};
    for (int64_t d = 0; d < w->n_docs; d++) {
        int64_t end = (d + 1 < w->n_docs ? (int64_t)w->docs[d + 1] : w->len) - 1;
        if (ig_tok(&view, w->width, end) == from) put_tok(w, end, to);
    }
}

static int run_sais(ig_writer *w, int32_t *sa, ig_sais_progress_fn done, void *done_ctx, char *err, size_t errlen) {
    uint32_t K = w->vocab_size + 1;
    int rc;
    if (w->len == 0) return IG_OK; /* no documents: nothing to sort (and tokens is NULL) */
    map_separators(w, w->sep, w->vocab_size);
    rc = ig_sais_final(w->tokens, w->width, sa, w->len, K, done, done_ctx);
    map_separators(w, w->vocab_size, w->sep);
    if (rc == IG_ERR_NOMEM) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory building the suffix array of %lld tokens", (long long)w->len);
    if (rc) return ig_fail(err, errlen, IG_ERR_ARG, "suffix array construction rejected the input (%d)", rc);
    return IG_OK;
}

/* With INFINIGRAM_BUILD_TIMING set, the time each phase of finishing a shard took goes to
   stderr (for profiling builds; NULL starts the clock). */
static void phase_time(const char *what) {
    static double last;
    const char *env = getenv("INFINIGRAM_BUILD_TIMING");
    if (!env || !*env) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (what) fprintf(stderr, "infinigram build: %-36s %7.2f s\n", what, now - last);
    last = now;
}

/* ntdcache.bin is built on a second thread while this one writes sa.bin and waits for the disk:
   the two passes are bound by different things (random token reads vs disk bandwidth). */
typedef struct {
    const ig_writer *w;
    const int32_t *sa;
    int64_t n_tok;
    int rc;
    char err[512];
} ntc_job;

static void *ntc_run(void *arg) {
    ntc_job *j = arg;
    ig_shard view = {.tokens = j->w->tokens, .total_len = j->w->len, .tok_end = j->w->len};
    j->rc = ig_ntc_write(&view, j->w->width, j->sa, j->n_tok, j->w->ntc_min_cost, j->w->dir, j->err, sizeof j->err);
    return NULL;
}

int ig_writer_finish(ig_writer *w, char *err, size_t errlen) {
    if (!w || w->finished) return ig_fail(err, errlen, IG_ERR_ARG, "writer is finished");
    if (w->doc_open) return ig_fail(err, errlen, IG_ERR_ARG, "a document added in parts is not ended");
    w->finished = 1;
    int64_t n = w->len, n_tok = w->len - w->n_docs;
    int rc = IG_OK;
    tok_stream_drain(w); /* the token array changes below (separators remapped for SA-IS) */
    if (w->tok_fd >= 0 && w->tok_written != w->len) tok_stream_drop(w); /* (cannot happen: every add streams) */
    (void)ig_prefault_take(w->tok_mem, (size_t)w->len * (size_t)w->width); /* stop; drop pages ahead */
    phase_time(NULL);
    size_t sa_bytes = (size_t)(n ? n : 1) * sizeof(int32_t);
    int32_t *sa = ig_prefault_take(w->sa_mem, sa_bytes);
    int sa_owned = !sa;
    if (sa_owned) sa = malloc(sa_bytes);
    if (!sa) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory for the suffix array of %lld tokens", (long long)n);
    int p = sa_width_for(n > 0 ? n : 1);
    sa_stream ss;
    sa_stream_open(&ss, w, sa, p, n_tok);
    rc = run_sais(w, sa, sa_stream_range, &ss, err, errlen);
    phase_time("suffix array (SA-IS; sa.bin streamed)");
    char path[4096];
    ig_out o = {0};
    ntc_job job = {.w = w, .sa = sa, .n_tok = n_tok, .rc = IG_OK};
    pthread_t ntc_thread;
    int ntc_mode = 0; /* 0 none, 1 thread started, 2 run inline at the end */
    if (!rc && w->ntc_min_cost > 0) ntc_mode = pthread_create(&ntc_thread, NULL, ntc_run, &job) == 0 ? 1 : 2;
    int sa_done = 0;
    if (!rc) {
        sa_done = sa_stream_close(&ss, w, err, errlen);
        if (sa_done < 0) rc = sa_done;
    } else if (!sa_stream_drain(&ss)) { /* (failed: the build directory is discarded) */
        close(ss.fd);
    }
    /* The first n_tok ranks are the suffixes that start with a real token. */
    if (!rc && !sa_done && !(rc = out_open(&o, path, sizeof path, w->dir, "sa.bin", err, errlen))) {
        rc = out_header(&o, "IGHF-SA\0", (uint32_t)p, (uint64_t)n_tok, (uint64_t)n, 0);
        if (!rc) rc = write_sa(&o, sa, n_tok, p);
        int rc2 = out_close(&o);
        if (!rc) rc = rc2;
    }
    if (!rc && !(rc = out_open(&o, path, sizeof path, w->dir, "unigram.bin", err, errlen))) {
        rc = write_unigram(&o, w, sa, n_tok);
        int rc2 = out_close(&o);
        if (!rc) rc = rc2;
    }
    phase_time("sa.bin + unigram.bin written");
    if (ntc_mode == 1) pthread_join(ntc_thread, NULL);
    if (ntc_mode == 2 && !rc) ntc_run(&job);
    if (!rc && job.rc) rc = ig_fail(err, errlen, job.rc, "%s", job.err);
    phase_time("ntdcache.bin done (second thread)");
    if (sa_owned) free(sa);
    ig_prefault_free(w->sa_mem); /* (the suffix array, when it lived there) */
    w->sa_mem = NULL;
    /* tokens.bin was streamed and its writeback started long ago: complete it now */
    int tok_done = 0;
    if (w->tok_fd >= 0) {
        int rc2 = tok_stream_close(w, err, errlen);
        if (!rc) rc = rc2;
        tok_done = !rc2;
    }
    if (!rc && !tok_done && !(rc = out_open(&o, path, sizeof path, w->dir, "tokens.bin", err, errlen))) {
        rc = out_header(&o, "IGHF-TOK", (uint32_t)w->width, (uint64_t)n, w->vocab_size, (uint64_t)w->n_docs);
        if (!rc) rc = out_write(&o, w->tokens, (size_t)n * (size_t)w->width);
        int rc2 = out_close(&o);
        if (!rc) rc = rc2;
    }
    if (!rc && !(rc = out_open(&o, path, sizeof path, w->dir, "docs.bin", err, errlen))) {
        rc = out_header(&o, "IGHF-DOC", 8, (uint64_t)w->n_docs + 1, (uint64_t)n, 0);
        if (!rc) rc = out_write(&o, w->docs, (size_t)w->n_docs * sizeof(uint64_t));
        uint64_t end = (uint64_t)n;
        if (!rc) rc = out_write(&o, &end, sizeof end);
        int rc2 = out_close(&o);
        if (!rc) rc = rc2;
    }
    phase_time("tokens.bin + docs.bin completed");
    return rc;
}
