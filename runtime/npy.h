/*
 * npy.h — training data from NumPy .npy files (`pcgc run --data DIR`): one
 * file per model input, DIR/NAME.npy, holding the whole dataset with the
 * samples along its first dim. Only the header is read up front; a rank
 * reads just the rows of its own shard of each batch.
 *
 * Accepted: format versions 1.0, 2.0 and 3.0, C order, little-endian or
 * byte-sized dtypes f4, f8, i4, i8, u1 (float inputs take f4/f8, integer
 * inputs i4/i8/u1; values are converted to the input's dtype, integers
 * checked to fit).
 *
 *     pcgc_npy f;
 *     if (pcgc_npy_open("data/x.npy", &f, &err) == PCGC_OK)
 *       pcgc_npy_read_rows(&f, 64, 32, PCGC_F32, 0, buf, NULL, &err);   // samples 64..95
 *     pcgc_npy_close(&f);
 */
#ifndef PCGC_NPY_H
#define PCGC_NPY_H

#include <stdint.h>

#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcgc_npy {
  char path[4096];
  char descr[8];        /* "<f4", "|u1", ... */
  int elem;             /* bytes per element */
  bool is_float, is_unsigned;
  int rank;
  int64_t shape[PCGC_MAX_RANK];
  int64_t data_offset;  /* where the array starts in the file */
  int64_t row_elems;    /* elements per sample (product of shape[1..]) */
  int fd;               /* open for reading rows (pcgc_npy_open), -1: none */
} pcgc_npy;

/* Reads and checks the header of path and keeps the file open for
 * pcgc_npy_read_rows until pcgc_npy_close. PCGC_ERR_IO when the file cannot be
 * read; PCGC_ERR_PARSE naming the file when it is no .npy file this reader
 * takes (the message says what it holds and what is accepted), or when the
 * file is shorter than its header says. */
pcgc_status pcgc_npy_open(const char *path, pcgc_npy *f, pcgc_error *err);

void pcgc_npy_close(pcgc_npy *f);

/* The header from the first n bytes of a file of file_size bytes (at most
 * 1 MiB + 12 are looked at); what pcgc_npy_open and the fuzzer call. */
pcgc_status pcgc_npy_parse(const char *bytes, size_t n, int64_t file_size, const char *path, pcgc_npy *f,
                           pcgc_error *err);

/* Checks that f can feed a model input of tensor type t: dtype kind, the
 * dims after the first equal to t's, at least t's dim 0 samples. name is
 * the input's name, for messages. */
pcgc_status pcgc_npy_check(const pcgc_npy *f, const char *name, const pcgc_ptensor *t, pcgc_error *err);

/* Reads samples [row0, row0 + n) converted to `want` (F32, F64, I32, I64)
 * into dst (n * row_elems elements), through `scratch` (n * row_elems * 8
 * bytes; NULL: allocated here), so a caller in a step loop allocates
 * nothing. Integers out of range of `want`, or below 0 / at least `bound`
 * when bound > 0, are an error naming the sample. */
pcgc_status pcgc_npy_read_rows(const pcgc_npy *f, int64_t row0, int64_t n, pcgc_dtype want, int64_t bound, void *dst,
                               void *scratch, pcgc_error *err);

#ifdef __cplusplus
}
#endif
#endif /* PCGC_NPY_H */
