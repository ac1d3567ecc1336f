/* Does where a triad's arrays lie in physical memory move its DRAM rate? One process, three
 * sets of three 2^25-double arrays (256 MiB each), timed alternately call by call:
 *   set 1: allocated and written first, array by array (the first pages a process touches
 *          come from the smallest free blocks while free memory is fragmented);
 *   set 2: allocated and written next, array by array;
 *   set 3: written in one interleaved loop, a[i], b[i], c[i] together, as BabelStream
 *          initialises its arrays.
 * Prints each array's physical locality (the share of its pages followed by one in the same
 * 2 MiB physical block; "step+1": followed by the very next frame; needs root to read
 * /proc/self/pagemap) to stderr, then one line per call: seconds since start, set, GB/s
 * (STREAM's count, 24 bytes per element).
 *
 * Build: gcc -O3 -march=native -fopenmp -ffast-math physical_layout.c -o physical_layout
 * Run:   OMP_NUM_THREADS=2 OMP_PROC_BIND=true ./physical_layout SECONDS
 */
#include <fcntl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void triad(double *restrict a, const double *restrict b, const double *restrict c,
                  double s, intptr_t n) {
#pragma omp parallel for schedule(static)
  for (intptr_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}
static void init(double *x, intptr_t n, double v) {
#pragma omp parallel for schedule(static)
  for (intptr_t i = 0; i < n; i++) x[i] = v + (i >> 9) * 1e-7;
}
static void init3(double *a, double *b, double *c, intptr_t n) {
#pragma omp parallel for schedule(static)
  for (intptr_t i = 0; i < n; i++) { a[i] = 0.1; b[i] = 0.2 + (i >> 9) * 1e-7; c[i] = 0.3; }
}
static void locality(const char *name, double *x, intptr_t n, int fd) {
  size_t pages = n * 8 / 4096, next = 0, same = 0;
  uint64_t *pm = malloc(pages * 8), mask = (1ULL << 55) - 1;
  if (fd < 0 || pread(fd, pm, pages * 8, ((uintptr_t)x >> 12) * 8) != (ssize_t)(pages * 8)) {
    fprintf(stderr, "%s: pagemap not readable\n", name); free(pm); return;
  }
  for (size_t p = 1; p < pages; p++) {
    uint64_t f = pm[p] & mask, g = pm[p - 1] & mask;
    next += f == g + 1;
    same += (f >> 9) == (g >> 9);
  }
  fprintf(stderr, "%s locality %.3f step+1 %.3f\n", name, (double)same / (pages - 1),
          (double)next / (pages - 1));
  free(pm);
}
int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 60.0;
  intptr_t n = 1L << 25;
  int fd = open("/proc/self/pagemap", O_RDONLY);
  double *x[3][3];
  for (int s = 0; s < 3; s++)
    for (int j = 0; j < 3; j++) x[s][j] = aligned_alloc(64, n * 8);
  for (int s = 0; s < 2; s++)
    for (int j = 0; j < 3; j++) init(x[s][j], n, 0.1 * (j + 1));
  init3(x[2][0], x[2][1], x[2][2], n);
  char name[8];
  for (int s = 0; s < 3; s++)
    for (int j = 0; j < 3; j++) { snprintf(name, sizeof name, "%d%c", s + 1, "abc"[j]); locality(name, x[s][j], n, fd); }
  double t0 = omp_get_wtime();
  while (omp_get_wtime() - t0 < seconds)
    for (int s = 0; s < 3; s++) {
      double a = omp_get_wtime();
      triad(x[s][0], x[s][1], x[s][2], 0.4, n);
      double b = omp_get_wtime();
      printf("%.4f %d %.2f\n", a - t0, s + 1, 24.0 * n / (b - a) / 1e9);
    }
  for (int s = 0; s < 3; s++) /* correctness after timing: a = b + 0.4 c everywhere sampled */
    for (intptr_t i = 0; i < n; i += 4099)
      if (__builtin_fabs(x[s][0][i] - (x[s][1][i] + 0.4 * x[s][2][i])) > 1e-12) { fprintf(stderr, "set %d wrong at %ld\n", s + 1, (long)i); return 1; }
  return 0;
}
