/* test_official.c - official infini-gram shards read in place (ig_open_mixed_at), under the
 * sanitizers: the fixture built by the official indexer (tests/official/data/u16_three_shards_meta)
 * answers every n-gram of up to 3 tokens drawn from its own text (and one token more) exactly as
 * a scan of its token files, next-token distributions included; every document reads back;
 * truncated copies of each file are refused with the file named. The same answers with sidecars
 * (ig_open_official_at: our suffix array of each shard, written by ig_writer, tokens.bin and
 * docs.bin removed), and from a copy laid out as huggingface_hub's cache (links into blobs/,
 * opened with IG_OPEN_HUB_LINKS, refused without it). Run from the repository root.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ftw.h>

#include "infinigram.h"

#define DIR "tests/official/data/u16_three_shards_meta"
#define SEP 0xFFFFu
#define MAXTOK 8192

static int failures = 0;
#define CHECK(c, ...)                                                                            \
    do {                                                                                         \
        if (!(c)) {                                                                              \
            if (failures++ < 20) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
        }                                                                                        \
    } while (0)

static uint16_t text[3][MAXTOK];
static int64_t len[3];

static void load(void) {
    for (int s = 0; s < 3; s++) {
        char path[256];
        snprintf(path, sizeof path, DIR "/tokenized.%d", s);
        FILE *f = fopen(path, "rb");
        if (!f) { perror(path); exit(2); }
        len[s] = (int64_t)fread(text[s], 2, MAXTOK, f);
        fclose(f);
    }
}

/* Occurrences of q in the documents (never across a separator), and next-token counts. */
static uint64_t scan(const uint32_t *q, int64_t m, uint64_t *next /* SEP + 1 entries or NULL */) {
    uint64_t c = 0;
    for (int s = 0; s < 3; s++)
        for (int64_t i = 0; i + m <= len[s]; i++) {
            int64_t k = 0;
            while (k < m && text[s][i + k] == q[k]) k++;
            if (k < m) continue;
            c++;
            if (next) next[i + m < len[s] ? text[s][i + m] : SEP]++;
        }
    return c;
}

static ig_index *open_dir(const char *dir, char *err, size_t errlen, int *rc) {
    int fds[3];
    const char *names[3] = {dir, dir, dir}, *sfx[3] = {".0", ".1", ".2"};
    for (int i = 0; i < 3; i++) fds[i] = open(dir, O_RDONLY | O_DIRECTORY);
    ig_index *ix = NULL;
    *rc = ig_open_mixed_at(&ix, fds, names, sfx, 3, 2, 65001, err, errlen);
    for (int i = 0; i < 3; i++) close(fds[i]);
    return ix;
}

/* Every n-gram check and every document of the fixture against ix; returns the queries run. */
static int64_t check_all(ig_index *ix) {
    char err[512];
    int rc;
    static uint64_t want[SEP + 1];
    uint32_t toks[4096];
    uint64_t cnts[4096], total;
    int64_t n, checks = 0;
    for (int s = 0; s < 3; s++)
        for (int64_t i = 1; i < len[s]; i++)
            for (int64_t m = 1; m <= 3 && i + m <= len[s]; m++) {
                uint32_t q[4];
                for (int64_t k = 0; k < m; k++) q[k] = text[s][i + k];
                if (q[m - 1] == SEP) break;
                for (int extra = 0; extra < 2; extra++) {
                    int64_t qm = m + extra;
                    if (extra) q[m] = (uint32_t)((i * 7 + m) % 700);
                    memset(want, 0, sizeof want);
                    uint64_t c = scan(q, qm, want), got = 0;
                    CHECK(ig_count(ix, q, qm, &got, err, sizeof err) == IG_OK && got == c,
                          "count shard %d pos %lld len %lld: %llu vs %llu", s, (long long)i, (long long)qm,
                          (unsigned long long)got, (unsigned long long)c);
                    rc = ig_ntd(ix, q, qm, toks, cnts, 4096, &n, &total, err, sizeof err);
                    CHECK(rc == IG_OK && total == c, "ntd total");
                    uint64_t sum = 0;
                    for (int64_t j = 0; j < n && !rc; j++) {
                        CHECK(j == 0 || toks[j] > toks[j - 1], "ntd ids not increasing");
                        CHECK(cnts[j] == want[toks[j]], "ntd count of %u: %llu vs %llu", toks[j],
                              (unsigned long long)cnts[j], (unsigned long long)want[toks[j]]);
                        sum += cnts[j];
                    }
                    CHECK(sum == c, "ntd sums to %llu, count %llu", (unsigned long long)sum, (unsigned long long)c);
                    checks++;
                }
            }
    /* every document reads back: the text between separators */
    int64_t doc = 0;
    for (int s = 0; s < 3; s++) {
        int64_t start = 1, d = 0;
        for (int64_t i = 1; i <= len[s]; i++) {
            if (i < len[s] && text[s][i] != SEP) continue;
            uint32_t out[MAXTOK];
            int64_t got;
            rc = ig_get_doc(ix, s, d, out, MAXTOK, &got, err, sizeof err);
            CHECK(rc == IG_OK && got == i - start, "doc %lld length", (long long)doc);
            for (int64_t k = 0; k < got && !rc; k++) CHECK(out[k] == text[s][start + k], "doc %lld token %lld", (long long)doc, (long long)k);
            d++, doc++, start = i + 1;
        }
    }
    return checks;
}

/* Copy file src to dst (the fixture's files are small). */
static void copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    if (!in || !out) { perror(src); exit(2); }
    static char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, out);
    fclose(in);
    fclose(out);
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *f) {
    (void)st; (void)type; (void)f;
    return remove(path);
}

static void remove_tree(const char *dir) { nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS); }

/* Open the fixture's three shards with the given sidecar directories (NULL: none) and flags. */
static ig_index *open_with(const char *dir, char *const *sides, int flags, char *err, size_t errlen, int *rc) {
    int fds[3], sfds[3];
    const char *names[3] = {dir, dir, dir}, *sfx[3] = {".0", ".1", ".2"};
    for (int i = 0; i < 3; i++) {
        fds[i] = open(dir, O_RDONLY | O_DIRECTORY);
        sfds[i] = sides ? open(sides[i], O_RDONLY | O_DIRECTORY) : -1;
    }
    ig_index *ix = NULL;
    *rc = ig_open_official_at(&ix, fds, names, sfx, sfds, (const char *const *)sides, 3, 2, 65001, flags, err, errlen);
    for (int i = 0; i < 3; i++) {
        close(fds[i]);
        if (sfds[i] >= 0) close(sfds[i]);
    }
    return ix;
}

/* Sidecars written by our writer from each shard's documents: every answer again; a sidecar of
   another shard (other sizes) refused, naming sa.bin. */
static int64_t check_sidecar(void) {
    char err[512], tmp[] = "/tmp/ig_sidecar_XXXXXX";
    int rc;
    if (!mkdtemp(tmp)) return 0;
    static char dirs[3][300];
    char *sides[3];
    for (int s = 0; s < 3; s++) {
        snprintf(dirs[s], sizeof dirs[s], "%s/shard_%d", tmp, s);
        sides[s] = dirs[s];
        mkdir(dirs[s], 0755);
        static uint16_t ids[MAXTOK];
        static int64_t offs[MAXTOK];
        int64_t n = 0, nd = 0;
        for (int64_t i = 0; i < len[s]; i++) {
            if (text[s][i] == SEP) offs[nd++] = n; else ids[n++] = text[s][i];
        }
        offs[nd] = n;
        ig_writer *w = NULL;
        rc = ig_writer_new(&w, dirs[s], 2, 65001, err, sizeof err);
        if (!rc) ig_writer_set_ntd_cache(w, 1);
        if (!rc) rc = ig_writer_add_docs_w(w, ids, 2, offs, nd, err, sizeof err);
        if (!rc) rc = ig_writer_finish(w, err, sizeof err);
        ig_writer_free(w);
        CHECK(rc == IG_OK, "sidecar writer: %s", err);
        char path[400];
        snprintf(path, sizeof path, "%s/tokens.bin", dirs[s]);
        unlink(path);
        snprintf(path, sizeof path, "%s/docs.bin", dirs[s]);
        unlink(path);
    }
    int64_t checks = 0;
    ig_index *ix = open_with(DIR, sides, 0, err, sizeof err, &rc);
    CHECK(rc == IG_OK, "open with sidecars: %s", err);
    if (ix) checks = check_all(ix);
    ig_close(ix);
    if (len[0] != len[1]) {
        char *swapped[3] = {dirs[1], dirs[0], dirs[2]};
        ix = open_with(DIR, swapped, 0, err, sizeof err, &rc);
        CHECK(rc == IG_ERR_FORMAT && !ix && strstr(err, "sa.bin") && strstr(err, "stale"), "swapped sidecar: %d %s", rc, err);
        ig_close(ix);
    }
    remove_tree(tmp);
    return checks;
}

/* The fixture laid out as huggingface_hub's cache: answers with IG_OPEN_HUB_LINKS, refused
   without it, and a link of another shape refused even with it. */
static int64_t check_hub_links(void) {
    char err[512], repo[] = "/tmp/ig_hub_XXXXXX", snap[400], path[600], target[200];
    int rc;
    if (!mkdtemp(repo)) return 0;
    snprintf(path, sizeof path, "%s/blobs", repo);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/snapshots", repo);
    mkdir(path, 0755);
    snprintf(snap, sizeof snap, "%s/snapshots/%040d", repo, 0);
    mkdir(snap, 0755);
    const char *all[] = {"tokenized", "table", "offset"};
    for (int a = 0; a < 3; a++)
        for (int s = 0; s < 3; s++) {
            char src[256], blob[64];
            snprintf(src, sizeof src, DIR "/%s.%d", all[a], s);
            snprintf(blob, sizeof blob, "%040d", 10 * a + s + 1);
            snprintf(path, sizeof path, "%s/blobs/%s", repo, blob);
            copy_file(src, path);
            snprintf(target, sizeof target, "../../blobs/%s", blob);
            snprintf(path, sizeof path, "%s/%s.%d", snap, all[a], s);
            CHECK(symlink(target, path) == 0, "symlink");
        }
    int64_t checks = 0;
    ig_index *ix = open_with(snap, NULL, IG_OPEN_HUB_LINKS, err, sizeof err, &rc);
    CHECK(rc == IG_OK, "open a Hub snapshot: %s", err);
    if (ix) checks = check_all(ix);
    ig_close(ix);
    ix = open_with(snap, NULL, 0, err, sizeof err, &rc);
    CHECK(rc == IG_ERR_FORMAT && !ix && strstr(err, "symbolic link"), "links without the flag: %d %s", rc, err);
    ig_close(ix);
    snprintf(path, sizeof path, "%s/table.1", snap);
    unlink(path);
    snprintf(target, sizeof target, "../../blobs/../blobs/%040d", 12);
    CHECK(symlink(target, path) == 0, "symlink");
    ix = open_with(snap, NULL, IG_OPEN_HUB_LINKS, err, sizeof err, &rc);
    CHECK(rc == IG_ERR_FORMAT && !ix && strstr(err, "table.1"), "a link of another shape: %d %s", rc, err);
    ig_close(ix);
    remove_tree(repo);
    return checks;
}

int main(void) {
    char err[512];
    int rc;
    load();
    ig_index *ix = open_dir(DIR, err, sizeof err, &rc);
    CHECK(rc == IG_OK, "open: %s", err);
    if (rc) return 1;
    int64_t checks = check_all(ix);
    ig_close(ix);
    checks += check_sidecar();
    checks += check_hub_links();

    /* damaged copies: each file truncated by one byte is refused, naming it */
    const char *files[] = {"tokenized.1", "table.1", "offset.1"};
    for (int f = 0; f < 3; f++) {
        char tmp[] = "/tmp/ig_official_XXXXXX";
        if (!mkdtemp(tmp)) return 2;
        const char *all[] = {"tokenized", "table", "offset"};
        for (int a = 0; a < 3; a++)
            for (int s = 0; s < 3; s++) {
                char src[256], dst[256];
                snprintf(src, sizeof src, DIR "/%s.%d", all[a], s);
                snprintf(dst, sizeof dst, "%s/%s.%d", tmp, all[a], s);
                FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
                static char buf[1 << 16];
                size_t k = fread(buf, 1, sizeof buf, in);
                char name[64];
                snprintf(name, sizeof name, "%s.%d", all[a], s);
                if (strcmp(name, files[f]) == 0) k--;
                fwrite(buf, 1, k, out);
                fclose(in);
                fclose(out);
            }
        ig_index *bad = open_dir(tmp, err, sizeof err, &rc);
        CHECK(rc == IG_ERR_FORMAT && !bad && strstr(err, files[f]), "truncated %s: rc %d, %s", files[f], rc, err);
        ig_close(bad);
        for (int a = 0; a < 3; a++)
            for (int s = 0; s < 3; s++) {
                char dst[256];
                snprintf(dst, sizeof dst, "%s/%s.%d", tmp, all[a], s);
                unlink(dst);
            }
        rmdir(tmp);
    }
    printf("test_official: %lld queries, %d failures\n", (long long)checks, failures);
    return failures != 0;
}
