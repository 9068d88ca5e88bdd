/*
 * expect_header.h — for the malformed-input corpora (tests/data/bad-*): every
 * file starts with "# expect: LINE:COL: MESSAGE", the position and a
 * substring of the error that file must produce. Include in one test file.
 */
#ifndef PCGC_TESTS_EXPECT_HEADER_H
#define PCGC_TESTS_EXPECT_HEADER_H

#include <check.h>
#include <stdio.h>
#include <string.h>

/* Reads the expectation of the corpus file `path` (named `name` in
 * messages) into *line, *col and want[0..n). */
static void expect_header(const char *path, const char *name, int *line, int *col, char *want, size_t n) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char first[512] = "";
  ck_assert_msg(fgets(first, sizeof first, f) != NULL, "%s is empty", name);
  fclose(f);
  first[strcspn(first, "\r\n")] = '\0';
  int used = 0;
  *line = *col = 0;
  ck_assert_msg(sscanf(first, "# expect: %d:%d: %n", line, col, &used) == 2 && used > 0,
                "%s: first line must be '# expect: LINE:COL: MESSAGE'", name);
  ck_assert_msg(first[used] != '\0', "%s: no expected message", name);
  snprintf(want, n, "%s", first + used);
}

#endif
