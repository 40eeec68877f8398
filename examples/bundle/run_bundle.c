/* run_bundle: run one entry point of a glow AOT bundle on raw input files.
 *
 * Build it against a bundle NAME in directory DIR (written by `glow bundle`):
 *   cc -O2 -std=c11 -DBUNDLE=NAME -I DIR run_bundle.c DIR/NAME.o -lm -lpthread -o run_bundle
 * Run it:
 *   ./run_bundle [-m ENTRY] [-w WEIGHTS] [-r RUNS] [-l] INPUT... OUTPUT...
 *
 * One INPUT file per input of the entry point and one OUTPUT file per output, in the
 * order of the header's table (NAME.h, ENTRY_inputs / ENTRY_outputs). Each file holds the
 * tensor's raw bytes, C order, this machine's byte order: what numpy's `tofile` writes
 * and `fromfile` reads. ENTRY defaults to the bundle's first entry point; WEIGHTS to the
 * bundle's weights file name in the current directory (unless they are embedded). With
 * RUNS > 1 the entry point runs that many times and the fastest and median latencies go
 * to stderr; the outputs are those of the last run.
 *
 * The weights file is mapped read-only (mmap), not read into memory: its bytes are the
 * page cache's, stored once however many processes run the bundle on this machine. With -l
 * it is read into private memory instead (a copy per process), which is how the Python JIT
 * holds its constants: the option exists to compare the two on a given system.
 *
 * Exit status: 0 done, 1 a usage or file error (said on stderr).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef BUNDLE
#error "compile with -DBUNDLE=NAME (the bundle's name) and -I the bundle's directory"
#endif
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)
#include STRINGIFY(BUNDLE.h)
#define INFO PASTE(BUNDLE, _bundle)

static int fail(const char *what, const char *detail) {
  fprintf(stderr, "run_bundle: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  return 1;
}

/* A zeroed block of at least `size` bytes starting on an `alignment` boundary. */
static uint8_t *aligned_block(uint64_t size, uint64_t alignment) {
  uint64_t rounded = (size + alignment - 1) / alignment * alignment;
  uint8_t *block = aligned_alloc(alignment, rounded ? rounded : alignment);
  if (block) memset(block, 0, rounded ? rounded : alignment);
  return block;
}

/* Read exactly `size` bytes of `path` into `into`; the file must hold that many, no more. */
static int read_exactly(const char *path, uint8_t *into, uint64_t size) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail("cannot open", path);
  size_t got = size ? fread(into, 1, size, f) : 0;
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != size || extra) {
    fprintf(stderr, "run_bundle: %s holds %s bytes than the %llu expected\n", path,
            extra ? "more" : "fewer", (unsigned long long)size);
    return 1;
  }
  return 0;
}

/* Map the weights file read-only; it must hold exactly `size` bytes. The mapping starts on a
 * page boundary, so every entry's constants keep their alignment. */
static const uint8_t *map_weights(const char *path, uint64_t size) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    fail("cannot open", path);
    return NULL;
  }
  struct stat about;
  if (fstat(fd, &about) != 0 || (uint64_t)about.st_size != size) {
    fprintf(stderr, "run_bundle: %s holds %lld bytes, the bundle's weights are %llu\n", path,
            (long long)about.st_size, (unsigned long long)size);
    close(fd);
    return NULL;
  }
  void *mapped = mmap(NULL, size ? size : 1, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd); /* the mapping keeps the file */
  if (mapped == MAP_FAILED) {
    fail("cannot map", path);
    return NULL;
  }
  return mapped;
}

/* Read the weights file into a private block (-l): `size` bytes, `alignment`-aligned. */
static const uint8_t *load_weights(const char *path, uint64_t size, uint64_t alignment) {
  uint8_t *block = aligned_block(size, alignment);
  if (!block) {
    fail("out of memory for the weights", path);
    return NULL;
  }
  if (read_exactly(path, block, size)) {
    free(block);
    return NULL;
  }
  return block;
}

static int write_all(const char *path, const uint8_t *from, uint64_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return fail("cannot create", path);
  size_t put = size ? fwrite(from, 1, size, f) : 0;
  if (fclose(f) != 0 || put != size) return fail("cannot write", path);
  return 0;
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const glow_bundle_info *info = &INFO;
  const char *entry = NULL, *weights_path = info->weights_file;
  long runs = 1;
  int load = 0; /* -l: read the weights into memory instead of mapping them */
  int arg = 1;
  while (arg < argc && argv[arg][0] == '-' && argv[arg][1] && !argv[arg][2]) {
    if (argv[arg][1] == 'l') {
      load = 1;
      arg += 1;
      continue;
    }
    if (arg + 1 >= argc) return fail("option needs a value", argv[arg]);
    switch (argv[arg][1]) {
      case 'm': entry = argv[arg + 1]; break;
      case 'w': weights_path = argv[arg + 1]; break;
      case 'r': runs = strtol(argv[arg + 1], NULL, 10); break;
      default: return fail("unknown option", argv[arg]);
    }
    arg += 2;
  }
  if (runs < 1) return fail("-r takes a number of runs of at least 1", NULL);
  const glow_bundle_model *model = &info->models[0];
  if (entry) {
    model = NULL;
    for (uint32_t i = 0; i < info->model_count; i++)
      if (strcmp(info->models[i].name, entry) == 0) model = &info->models[i];
    if (!model) return fail("no such entry point in the bundle", entry);
  }
  int files = argc - arg;
  if (files != (int)(model->input_count + model->output_count)) {
    fprintf(stderr, "run_bundle: %s takes %u input and %u output files, got %d files\n",
            model->name, model->input_count, model->output_count, files);
    return 1;
  }

  const uint8_t *constants;
  const uint8_t *weights = NULL;
  if (info->weights) {
    constants = info->weights + model->constant_offset;
  } else {
    weights = load ? load_weights(weights_path, info->weights_size, info->alignment)
                   : map_weights(weights_path, info->weights_size);
    if (!weights) return 1;
    constants = weights + model->constant_offset;
  }
  uint8_t *mutable_weights = aligned_block(model->mutable_size, info->alignment);
  uint8_t *activations = aligned_block(model->activations_size, info->alignment);
  if (!mutable_weights || !activations) return fail("out of memory for the regions", NULL);
  for (uint32_t i = 0; i < model->input_count; i++) {
    const glow_bundle_tensor *t = &model->inputs[i];
    if (read_exactly(argv[arg + i], mutable_weights + t->offset, t->size)) return 1;
  }

  double *seconds = malloc(sizeof(double) * (size_t)runs);
  if (!seconds) return fail("out of memory", NULL);
  for (long r = 0; r < runs; r++) {
    double start = now_seconds();
    model->run(constants, mutable_weights, activations);
    seconds[r] = now_seconds() - start;
  }
  if (runs > 1) {
    qsort(seconds, (size_t)runs, sizeof(double), by_value);
    fprintf(stderr, "%s: %ld runs, fastest %.3f ms, median %.3f ms\n", model->name, runs,
            seconds[0] * 1e3, seconds[runs / 2] * 1e3);
  }
  for (uint32_t i = 0; i < model->output_count; i++) {
    const glow_bundle_tensor *t = &model->outputs[i];
    if (write_all(argv[arg + model->input_count + i], mutable_weights + t->offset, t->size)) return 1;
  }
  if (model->shutdown) model->shutdown();
  free(seconds);
  free(activations);
  free(mutable_weights);
  if (weights && load) free((void *)weights);
  else if (weights) munmap((void *)weights, info->weights_size ? info->weights_size : 1);
  return 0;
}
