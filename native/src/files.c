/* files.c - how the core opens index files.
 *
 * Reading: a file is opened by name inside its shard directory's descriptor (openat), never
 * through a symbolic link (O_NOFOLLOW), never waiting (O_NONBLOCK: a FIFO or a device in place of
 * a file would otherwise block open() forever), and only a regular file with exactly one link is
 * accepted. Resolving a path and then opening it would be a race: a link could be swapped in
 * between. A hard link is refused because it may be another user's file placed into an index
 * that a server reads on their behalf.
 *
 * Writing: every file is created new (O_EXCL after removing any old name), so a build never
 * writes into a file that another process may have memory-mapped (that would be SIGBUS there).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#ifndef O_NOFOLLOW
#define O_NOFOLLOW 0
#endif

int ig_open_index_file(int dirfd, const char *dir, const char *name, int optional, int *fd_out,
                       struct stat *st, char *err, size_t errlen) {
    *fd_out = -1;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
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
