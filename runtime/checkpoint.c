/*
 * checkpoint.c — reading and writing training checkpoints (checkpoint.h,
 * docs/checkpoint-format.md). Plain C without MPI: the runtime gathers the
 * logical tensors on rank 0 before saving, and every rank reads the file
 * itself and keeps its own boxes when resuming.
 */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

#define MAGIC "pcgc-checkpoint 1\n"

pcgc_checkpoint *pcgc_checkpoint_new(int n) {
  pcgc_checkpoint *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->t = calloc((size_t)(n > 0 ? n : 1), sizeof *c->t);
  if (!c->t) {
    free(c);
    return NULL;
  }
  c->n = n;
  return c;
}

void pcgc_checkpoint_free(pcgc_checkpoint *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++)
    for (int s = 0; s < 3; s++) free(c->t[i].data[s]);
  free(c->t);
  free(c);
}

pcgc_status pcgc_checkpoint_tensor_init(pcgc_checkpoint *c, int i, const char *name, int rank, const int64_t *dims,
                                        int states, pcgc_error *err) {
  if (!c || i < 0 || i >= c->n || !name || rank < 0 || rank > PCGC_MAX_RANK || states < 1 || states > 3 ||
      strlen(name) >= PCGC_CKPT_NAME_MAX)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_checkpoint_tensor_init: bad argument");
  pcgc_ckpt_tensor *t = &c->t[i];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->rank = rank;
  t->numel = 1;
  for (int d = 0; d < rank; d++) {
    t->dims[d] = dims[d];
    t->numel *= dims[d];
  }
  t->states = states;
  for (int s = 0; s < states; s++)
    if (!(t->data[s] = calloc((size_t)(t->numel ? t->numel : 1), sizeof(float))))
      return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory for checkpoint tensor '%s'", name);
  return PCGC_OK;
}

const pcgc_ckpt_tensor *pcgc_checkpoint_find(const pcgc_checkpoint *c, const char *name) {
  for (int i = 0; c && i < c->n; i++)
    if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
  return NULL;
}

/* ------------------------------------------------------------- writing */

pcgc_status pcgc_checkpoint_save(const char *dir, const pcgc_checkpoint *c, char *path, size_t path_size,
                                 pcgc_error *err) {
  if (!dir || !c) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_checkpoint_save: bad argument");
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return pcgc_error_set(err, PCGC_ERR_IO, "cannot create checkpoint directory '%s': %s", dir, strerror(errno));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing a checkpoint");
  fprintf(f, MAGIC "model %s\nstep %lld\nseed %llu\noptimizer %s\ntensors %d\n", c->model[0] ? c->model : "-",
          (long long)c->step, (unsigned long long)c->seed, c->optimizer[0] ? c->optimizer : "sgd", c->n);
  for (int i = 0; i < c->n; i++) {
    const pcgc_ckpt_tensor *t = &c->t[i];
    fprintf(f, "%s %d", t->name, t->rank);
    for (int d = 0; d < t->rank; d++) fprintf(f, " %lld", (long long)t->dims[d]);
    fprintf(f, " %d\n", t->states);
  }
  fputs("data\n", f);
  for (int i = 0; i < c->n; i++) /* f32 in host order: little-endian on every machine pcgc builds for */
    for (int s = 0; s < c->t[i].states; s++) fwrite(c->t[i].data[s], sizeof(float), (size_t)c->t[i].numel, f);
  if (fclose(f) != 0) {
    free(buf);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing a checkpoint");
  }
  uint64_t h = XXH3_64bits(buf, len);
  char *all = realloc(buf, len + 8);
  if (!all) {
    free(buf);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing a checkpoint");
  }
  for (int b = 0; b < 8; b++) all[len + (size_t)b] = (char)(h >> (8 * b));
  char file[4096], name[64];
  snprintf(name, sizeof name, "step-%08lld.ckpt", (long long)c->step);
  snprintf(file, sizeof file, "%s/%s", dir, name);
  pcgc_status st = pcgc_write_file_atomic(file, all, len + 8, err);
  free(all);
  if (st == PCGC_OK) { /* only then does `latest` point at it */
    char latest[4096], line[80];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    int n = snprintf(line, sizeof line, "%s\n", name);
    st = pcgc_write_file_atomic(latest, line, (size_t)n, err);
  }
  if (st == PCGC_OK && path) snprintf(path, path_size, "%s", file);
  return st;
}

/* ------------------------------------------------------------- reading */

static pcgc_status bad(pcgc_error *err, const char *path, int line, const char *what) {
  pcgc_error_set(err, PCGC_ERR_PARSE, "%s:%d: not a usable checkpoint: %s", path, line, what);
  pcgc_error_hint(err, "checkpoints are written by `pcgc run --checkpoint DIR`; resume from an older one by "
                       "writing its file name into DIR/latest (docs/checkpoint-format.md)");
  return PCGC_ERR_PARSE;
}

/* The next header line (without its newline) into out; false at the end of the bytes. */
static bool next_line(const char *b, size_t len, size_t *at, char *out, size_t n) {
  const char *nl = *at < len ? memchr(b + *at, '\n', len - *at) : NULL;
  if (!nl) return false;
  size_t k = (size_t)(nl - (b + *at));
  if (k >= n || memchr(b + *at, '\0', k)) return false;
  memcpy(out, b + *at, k);
  out[k] = '\0';
  *at += k + 1;
  return true;
}

pcgc_status pcgc_checkpoint_parse(const char *b, size_t len, const char *path, pcgc_checkpoint **out,
                                  pcgc_error *err) {
  *out = NULL;
  if (!path) path = "<checkpoint>";
  if (len < strlen(MAGIC) || memcmp(b, MAGIC, strlen(MAGIC)) != 0)
    return bad(err, path, 1, "it does not start with 'pcgc-checkpoint 1'");
  if (len < strlen(MAGIC) + 8) return bad(err, path, 1, "it is cut off");
  uint64_t want = 0;
  for (int k = 0; k < 8; k++) want |= (uint64_t)(unsigned char)b[len - 8 + (size_t)k] << (8 * k);
  if (XXH3_64bits(b, len - 8) != want)
    return bad(err, path, 1, "its checksum does not match: the file is cut off or damaged");
  size_t at = strlen(MAGIC), body = len - 8;
  char line[1024], word[PCGC_CKPT_NAME_MAX];
  long long step = -1, n = -1;
  unsigned long long seed = 0;
  char model[PCGC_CKPT_NAME_MAX] = "", optim[16] = "";
  int ln = 1;
  const char *keys[] = {"model", "step", "seed", "optimizer", "tensors"};
  for (int k = 0; k < 5; k++) {
    ln++;
    if (!next_line(b, body, &at, line, sizeof line)) return bad(err, path, ln, "the header is cut off");
    char rest[PCGC_CKPT_NAME_MAX + 8];
    if (sscanf(line, "%255s %263s", word, rest) != 2 || strcmp(word, keys[k]) != 0) {
      char what[128];
      snprintf(what, sizeof what, "expected '%s VALUE'", keys[k]);
      return bad(err, path, ln, what);
    }
    char *end = NULL;
    errno = 0;
    if (k == 0) snprintf(model, sizeof model, "%.255s", rest);
    else if (k == 1) step = strtoll(rest, &end, 10);
    else if (k == 2) seed = strtoull(rest, &end, 10);
    else if (k == 3) snprintf(optim, sizeof optim, "%.15s", rest);
    else n = strtoll(rest, &end, 10);
    if (end && (*end || errno)) return bad(err, path, ln, "expected a non-negative integer");
  }
  if (step < 0 || n < 0 || n > 1000000) return bad(err, path, ln, "step or tensor count out of range");
  pcgc_checkpoint *c = pcgc_checkpoint_new((int)n);
  if (!c) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading '%s'", path);
  snprintf(c->model, sizeof c->model, "%s", model);
  snprintf(c->optimizer, sizeof c->optimizer, "%s", optim);
  c->step = step;
  c->seed = seed;
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < c->n && st == PCGC_OK; i++) {
    ln++;
    if (!next_line(b, body, &at, line, sizeof line)) {
      st = bad(err, path, ln, "the tensor list is cut off");
      break;
    }
    int64_t v[PCGC_MAX_RANK + 2];
    int nv = 0, used = 0;
    const char *p = line;
    if (sscanf(p, "%255s%n", word, &used) != 1) {
      st = bad(err, path, ln, "expected 'NAME RANK DIMS... STATES'");
      break;
    }
    p += used;
    long long x;
    while (nv < PCGC_MAX_RANK + 2 && sscanf(p, "%lld%n", &x, &used) == 1) {
      v[nv++] = x;
      p += used;
    }
    while (*p == ' ') p++;
    if (*p || nv < 2 || v[0] < 0 || v[0] > PCGC_MAX_RANK || nv != v[0] + 2 || v[nv - 1] < 1 || v[nv - 1] > 3) {
      st = bad(err, path, ln, "expected 'NAME RANK DIMS... STATES' (states 1 to 3)");
      break;
    }
    int64_t numel = 1;
    for (int d = 0; d < v[0]; d++) {
      if (v[1 + d] < 0 || v[1 + d] > ((int64_t)1 << 40) || (v[1 + d] && numel > ((int64_t)1 << 40) / v[1 + d])) {
        st = bad(err, path, ln, "a dim is out of range");
        break;
      }
      numel *= v[1 + d];
    }
    if (st == PCGC_OK && (uint64_t)numel * 4 * (uint64_t)v[nv - 1] > body) st = bad(err, path, ln, "the tensor is larger than the file");
    if (st == PCGC_OK) st = pcgc_checkpoint_tensor_init(c, i, word, (int)v[0], v + 1, (int)v[nv - 1], err);
  }
  if (st == PCGC_OK) {
    ln++;
    if (!next_line(b, body, &at, line, sizeof line) || strcmp(line, "data") != 0)
      st = bad(err, path, ln, "expected 'data' after the tensor list");
  }
  for (int i = 0; i < c->n && st == PCGC_OK; i++)
    for (int s = 0; s < c->t[i].states && st == PCGC_OK; s++) {
      size_t bytes = (size_t)c->t[i].numel * sizeof(float);
      if (body - at < bytes) {
        st = bad(err, path, ln, "the data is shorter than the tensor list says");
        break;
      }
      memcpy(c->t[i].data[s], b + at, bytes);
      at += bytes;
    }
  if (st == PCGC_OK && at != body) st = bad(err, path, ln, "there are bytes after the last tensor's data");
  if (st != PCGC_OK) {
    pcgc_checkpoint_free(c);
    return st;
  }
  *out = c;
  return PCGC_OK;
}

pcgc_status pcgc_checkpoint_read(const char *path, pcgc_checkpoint **out, pcgc_error *err) {
  *out = NULL;
  size_t len = 0;
  char *b = pcgc_read_file(path, &len, err);
  if (!b) return err && err->status ? err->status : PCGC_ERR_IO;
  pcgc_status st = pcgc_checkpoint_parse(b, len, path, out, err);
  free(b);
  return st;
}

pcgc_status pcgc_checkpoint_latest(const char *dir, char *path, size_t path_size, pcgc_error *err) {
  char latest[4096];
  snprintf(latest, sizeof latest, "%s/latest", dir);
  FILE *f = fopen(latest, "r");
  if (!f) {
    pcgc_error_set(err, PCGC_ERR_IO, "no checkpoint to resume from in '%s' (%s: %s)", dir, latest, strerror(errno));
    pcgc_error_hint(err, "run with --checkpoint %s --every K first; without --resume training starts from step 0",
                    dir);
    return PCGC_ERR_IO;
  }
  char name[256] = "";
  bool ok = fgets(name, sizeof name, f) != NULL;
  fclose(f);
  size_t k = strlen(name);
  while (k && (name[k - 1] == '\n' || name[k - 1] == '\r')) name[--k] = '\0';
  if (!ok || !k || strchr(name, '/'))
    return pcgc_error_set(err, PCGC_ERR_PARSE, "%s must hold the file name of a checkpoint in %s", latest, dir);
  snprintf(path, path_size, "%s/%s", dir, name);
  return PCGC_OK;
}
