/* reference.h - what the C tests (native/tests/) and the fuzz targets (fuzz/) share: a private
 * temporary directory, small corpora written and opened through the public API, and brute-force
 * references over their token arrays that every query's answer is checked against.
 *
 * Everything is header-only (static functions) so that each test or fuzz target is one
 * translation unit plus the engine's sources (native/tests/run.sh, fuzz/build.sh).
 */
#ifndef IG_TEST_REFERENCE_H
#define IG_TEST_REFERENCE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infinigram.h"

/* ------------------------------------------------------------------ a private temp directory */

static char ref_tmp_root[4096];

static int ref_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

static void ref_rm_tree(const char *path) { nftw(path, ref_rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void ref_cleanup(void) {
    if (ref_tmp_root[0]) ref_rm_tree(ref_tmp_root);
}

/* A directory for this process, removed at exit: under $IG_TEST_TMPDIR, else /dev/shm when it
   exists (no disk I/O), else /tmp. */
static const char *ref_tmpdir(void) {
    if (ref_tmp_root[0]) return ref_tmp_root;
    const char *base = getenv("IG_TEST_TMPDIR");
    struct stat st;
    if (!base) base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(ref_tmp_root, sizeof ref_tmp_root, "%s/igtest-XXXXXX", base);
    if (!mkdtemp(ref_tmp_root)) {
        perror("mkdtemp");
        abort();
    }
    atexit(ref_cleanup);
    return ref_tmp_root;
}

/* ------------------------------------------------------------------ corpora and references */

/* A corpus: documents as a flat id array with offsets, cut into shards of whole documents. */
typedef struct {
    int width;
    uint32_t vocab, sep;
    int64_t n_docs;
    uint32_t *ids;    /* all documents' tokens */
    int64_t *offsets; /* n_docs + 1 */
    int n_shards;
    int64_t shard_doc[9]; /* shard s holds documents shard_doc[s] .. shard_doc[s+1] */
    /* per shard: the token array as stored (documents each followed by the separator) */
    uint32_t *text[8];
    int64_t text_len[8];
    char *dirs[8];
} ref_corpus;

static void ref_corpus_free(ref_corpus *c) {
    free(c->ids);
    free(c->offsets);
    for (int s = 0; s < 8; s++) {
        free(c->text[s]);
        free(c->dirs[s]);
    }
    memset(c, 0, sizeof *c);
}

/* Fill the per-shard text arrays from ids/offsets/shard_doc. */
static void ref_corpus_texts(ref_corpus *c) {
    for (int s = 0; s < c->n_shards; s++) {
        int64_t a = c->shard_doc[s], b = c->shard_doc[s + 1];
        int64_t len = (c->offsets[b] - c->offsets[a]) + (b - a);
        c->text[s] = malloc((size_t)(len ? len : 1) * sizeof(uint32_t));
        int64_t k = 0;
        for (int64_t d = a; d < b; d++) {
            for (int64_t i = c->offsets[d]; i < c->offsets[d + 1]; i++) c->text[s][k++] = c->ids[i];
            c->text[s][k++] = c->sep;
        }
        c->text_len[s] = len;
    }
}

/* Write the corpus's shards as <parent>/<name>_<s> with the writer API; 0 on success. */
static int ref_corpus_write(ref_corpus *c, const char *parent, const char *name, int64_t ntd_min_cost) {
    char err[512];
    for (int s = 0; s < c->n_shards; s++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s_%d", parent, name, s);
        if (mkdir(path, 0700) != 0 && errno != EEXIST) return -1;
        free(c->dirs[s]);
        c->dirs[s] = strdup(path);
        ig_writer *w = NULL;
        int rc = ig_writer_new(&w, path, c->width, c->vocab, err, sizeof err);
        if (rc) {
            fprintf(stderr, "writer: %s\n", err);
            return rc;
        }
        ig_writer_set_ntd_cache(w, ntd_min_cost);
        int64_t a = c->shard_doc[s], b = c->shard_doc[s + 1];
        rc = ig_writer_add_docs(w, c->ids, c->offsets + a, b - a, err, sizeof err);
        if (!rc) rc = ig_writer_finish(w, err, sizeof err);
        ig_writer_free(w);
        if (rc) {
            fprintf(stderr, "writer: %s\n", err);
            return rc;
        }
    }
    return 0;
}

static int ref_corpus_open(const ref_corpus *c, ig_index **out) {
    char err[512];
    int rc = ig_open(out, (const char *const *)c->dirs, c->n_shards, err, sizeof err);
    if (rc) fprintf(stderr, "open: %s\n", err);
    return rc;
}

/* Occurrences of q[0..len) in the corpus (len 0: every non-separator position). */
static uint64_t ref_naive_count(const ref_corpus *c, const uint32_t *q, int64_t len) {
    uint64_t n = 0;
    for (int s = 0; s < c->n_shards; s++) {
        const uint32_t *t = c->text[s];
        for (int64_t p = 0; p < c->text_len[s]; p++) {
            if (t[p] == c->sep) continue;
            int64_t k = 0;
            while (k < len && p + k < c->text_len[s] && t[p + k] == q[k]) k++;
            n += k == len;
        }
    }
    return n;
}

/* Count of q followed by `next` (the separator for "ends its document"); q nonempty. */
static uint64_t ref_naive_count_next(const ref_corpus *c, const uint32_t *q, int64_t len, uint32_t next) {
    uint64_t n = 0;
    for (int s = 0; s < c->n_shards; s++) {
        const uint32_t *t = c->text[s];
        for (int64_t p = 0; p + len < c->text_len[s]; p++) {
            if (t[p] == c->sep) continue;
            int64_t k = 0;
            while (k < len && t[p + k] == q[k]) k++;
            n += k == len && t[p + len] == next;
        }
    }
    return n;
}

static int ref_valid_ids(const ref_corpus *c, const uint32_t *q, int64_t len) {
    for (int64_t i = 0; i < len; i++)
        if (q[i] >= c->vocab) return 0;
    return 1;
}

/* Longest suffix of p[0..len) that occurs (0 = the empty one). */
static int64_t ref_naive_suffix(const ref_corpus *c, const uint32_t *p, int64_t len, int64_t max_len) {
    int64_t best = 0;
    for (int64_t l = 1; l <= len && l <= max_len; l++) {
        if (!ref_naive_count(c, p + len - l, l)) break; /* counts only shrink as l grows */
        best = l;
    }
    return best;
}

/* Deterministic pseudo-random documents over a small alphabet (with repeats, so long n-grams
   occur), a few empty documents and some rare ids up to vocab - 1. */
static void ref_corpus_make(ref_corpus *c, int width, uint32_t vocab, int64_t n_docs, int64_t max_doc,
                           int n_shards, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->width = width;
    c->vocab = vocab;
    c->sep = width == 1 ? 0xFFu : width == 2 ? 0xFFFFu : 0xFFFFFFFFu;
    c->n_docs = n_docs;
    c->offsets = calloc((size_t)n_docs + 1, sizeof(int64_t));
    c->ids = malloc((size_t)(n_docs * max_doc + 1) * sizeof(uint32_t));
    uint64_t x = seed | 1;
    int64_t k = 0;
    uint32_t small = vocab < 6 ? vocab : 6;
    for (int64_t d = 0; d < n_docs; d++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int64_t len = d % 7 == 3 ? 0 : (int64_t)(x % (uint64_t)max_doc);
        for (int64_t i = 0; i < len; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            uint32_t t;
            if (i >= 8 && x % 3 == 0) t = c->ids[k - 8]; /* a repeat: long matches */
            else if (x % 17 == 0) t = (uint32_t)((x >> 20) % vocab);
            else t = (uint32_t)((x >> 8) % small);
            c->ids[k++] = t;
        }
        c->offsets[d + 1] = k;
    }
    c->n_shards = n_shards;
    for (int s = 0; s <= n_shards; s++) c->shard_doc[s] = n_docs * s / n_shards;
    ref_corpus_texts(c);
}

#endif
