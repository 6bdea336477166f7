/* files.c - how the core opens index files.
 *
 * Reading: a file is opened by name inside its shard directory's descriptor (openat), never
 * through a symbolic link (O_NOFOLLOW), never waiting (O_NONBLOCK: a FIFO or a device in place of
 * a file would otherwise block open() forever), and only a regular file with exactly one link is
 * accepted. Resolving a path and then opening it would be a race: a link could be swapped in
 * between. A hard link is refused because it may be another user's file placed into an index
 * that a server reads on their behalf.
 *
 * One exception, asked for per index (IG_OPEN_HUB_LINKS): huggingface_hub's cache, whose snapshot
 * folders hold links "../../blobs/<hash>" into the repository's blob store. Such a link (that
 * exact shape only) is opened by its target, relative to the shard directory; the blob must be a
 * regular file with one link like any index file.
 *
 * Writing: every file is created new (O_EXCL after removing any old name), so a build never
 * writes into a file that another process may have memory-mapped (that would be SIGBUS there).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

#ifndef O_NOFOLLOW
#define O_NOFOLLOW 0
#endif

/* A huggingface_hub cache link: relative, up to the repository folder, into its blobs/ (named by
   the file's hash), e.g. "../../blobs/6f1a...": as the Hub cache lays out every snapshot. */
static int is_hub_blob_target(const char *t) {
    const char *p = t;
    int ups = 0;
    while (strncmp(p, "../", 3) == 0) { p += 3; ups++; }
    if (ups < 2 || strncmp(p, "blobs/", 6) != 0) return 0;
    p += 6;
    size_t n = 0;
    for (; p[n]; n++)
        if (!((p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'f'))) return 0;
    return n >= 40 && n <= 64;
}

/* With IG_LINKS_HUB: name may be a Hub cache link (is_hub_blob_target), opened by its target
   relative to dirfd, the blob itself never through a link. */
static int open_hub_blob(int dirfd, const char *name) {
    char target[256];
    ssize_t n = readlinkat(dirfd, name, target, sizeof target - 1);
    if (n <= 0 || (size_t)n >= sizeof target - 1) return -1;
    target[n] = 0;
    if (!is_hub_blob_target(target)) return -1;
    return openat(dirfd, target, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

int ig_open_index_file(int dirfd, const char *dir, const char *name, int optional, int *fd_out,
                       struct stat *st, char *err, size_t errlen) {
    *fd_out = -1;
    int links = optional & IG_LINKS_HUB;
    optional &= ~IG_LINKS_HUB;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 && links && (errno == ELOOP || errno == EMLINK)) {
        fd = open_hub_blob(dirfd, name);
        if (fd < 0) errno = ELOOP;
    }
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT && optional) return IG_OK;
        if (e == ENOENT) return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: missing", dir, name);
        if (e == ELOOP || e == EMLINK) /* (what O_NOFOLLOW answers for a link; FreeBSD: EMLINK) */
            return ig_fail(err, errlen, IG_ERR_FORMAT,
                           "%s/%s: a symbolic link; index files are never opened through links "
                           "(copy the file into the index)", dir, name);
        return ig_fail(err, errlen, IG_ERR_IO, "%s/%s: cannot open (%s)", dir, name, strerror(e));
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return ig_fail(err, errlen, IG_ERR_FORMAT, "%s/%s: not a regular file", dir, name);
    }
    if (st->st_nlink != 1) {
        unsigned long links = (unsigned long)st->st_nlink;
        close(fd);
        return ig_fail(err, errlen, IG_ERR_FORMAT,
                       "%s/%s: has %lu hard links; an index's files must be its own (copy the file "
                       "instead of linking it)", dir, name, links);
    }
    *fd_out = fd;
    return IG_OK;
}

int ig_create_index_file(const char *path) {
    if (unlink(path) != 0 && errno != ENOENT) return -1;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}
