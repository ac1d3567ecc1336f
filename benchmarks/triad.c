/* STREAM-style triad a[i] = b[i] + s*c[i], OpenMP, written for roofprof's CPU benchmark.
 *
 * Build: gcc -O3 -march=native -fopenmp triad.c -o triad
 * Run:   ./triad [elements_per_array] [repeats] [hugepages 0|1]
 * Prints one JSON line: best (minimum-time) bandwidth with STREAM's byte count,
 * 3 arrays x 8 bytes per element (write-allocate traffic is not counted, as in STREAM).
 *
 * hugepages=1 (default) asks for transparent huge pages with madvise(MADV_HUGEPAGE), as
 * numpy does for its large arrays (and so for roofprof's probe buffers): both sides then
 * pay the same TLB cost and the comparison is about the kernels, not the page size.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static double *alloc_array(long n, int hugepages) {
    const size_t align = 2u << 20;  /* 2 MiB: huge-page aligned */
    size_t bytes = ((size_t)n * sizeof(double) + align - 1) / align * align;
    void *p = NULL;
    if (posix_memalign(&p, align, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (hugepages) madvise(p, bytes, MADV_HUGEPAGE);
#else
    (void)hugepages;
#endif
    return (double *)p;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1L << 25;  /* 32 Mi doubles = 256 MiB per array */
    int repeats = argc > 2 ? atoi(argv[2]) : 20;
    int hugepages = argc > 3 ? atoi(argv[3]) : 1;
    double *a = alloc_array(n, hugepages);
    double *b = alloc_array(n, hugepages);
    double *c = alloc_array(n, hugepages);
    if (!a || !b || !c) { fprintf(stderr, "allocation failed\n"); return 1; }
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) { a[i] = 1.0; b[i] = 2.0; c[i] = 0.5; }
    const double s = 3.0;
    double best = 1e30, total = 0.0;
    for (int r = 0; r < repeats; r++) {
        double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        double t = omp_get_wtime() - t0;
        if (r > 0 && t < best) best = t;  /* first run is warm-up */
        total += t;
    }
    /* check: every a[i] must be 2 + 3*0.5 = 3.5 */
    for (long i = 0; i < n; i += 4099) if (a[i] != 3.5) { fprintf(stderr, "wrong result\n"); return 1; }
    printf("{\"kernel\": \"triad\", \"elements\": %ld, \"threads\": %d, \"repeats\": %d, "
           "\"hugepages\": %d, \"best_time_s\": %.9f, \"bytes_per_s\": %.6e}\n",
           n, omp_get_max_threads(), repeats, hugepages, best, 3.0 * sizeof(double) * n / best);
    free(a); free(b); free(c);
    return 0;
}
