/*
 * fileio.c — writing a whole file atomically: a temporary file beside the
 * target (mkstemp), every byte written, mode 0644, fsync, rename. A reader
 * sees the old file or the whole new one, never a torn write, and a crash
 * leaves at most a stray temporary file.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pcg.h"

pcgc_status pcgc_write_file_atomic(const char *path, const char *data, size_t len, pcgc_error *err) {
  if (!path || (!data && len)) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_write_file_atomic: bad argument");
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (!tmp) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing %s", path);
  snprintf(tmp, n, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    pcgc_status st =
        pcgc_error_set(err, PCGC_ERR_IO, "cannot create a temporary file next to '%s': %s", path, strerror(errno));
    free(tmp);
    return st;
  }
  size_t done = 0;
  bool ok = true;
  while (ok && done < len) {
    ssize_t w = write(fd, data + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    ok = w > 0;
    if (ok) done += (size_t)w;
  }
  ok = ok && fchmod(fd, 0644) == 0;
  ok = ok && fsync(fd) == 0;
  int saved = errno;
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp, path) != 0) {
    saved = errno;
    ok = false;
  }
  pcgc_status st = PCGC_OK;
  if (!ok) {
    unlink(tmp);
    st = pcgc_error_set(err, PCGC_ERR_IO, "cannot write '%s': %s", path, strerror(saved ? saved : EIO));
  }
  free(tmp);
  return st;
}
