/* fuzz.h — what the fuzz targets share (tests/fuzz). Each target defines
 * LLVMFuzzerTestOneInput; built with clang -fsanitize=fuzzer (GC_FUZZ=ON) it
 * is a libFuzzer binary, built plainly it links replay_main.c and replays
 * the files named on its command line (the regression inputs). */
#ifndef GC_FUZZ_H
#define GC_FUZZ_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes data to a file of this process (for readers that take a path);
 * returns its path. */
const char *fuzz_file(const uint8_t *data, size_t size);

/* Splits data at newlines into at most max-1 arguments after argv[0] (a
 * copy in *buf, NUL-terminated); returns argc. */
int fuzz_args(const uint8_t *data, size_t size, const char *argv0, char **argv, int max, char **buf);

/* Runs with stdout and stderr sent to /dev/null (restored by fuzz_quiet_end). */
void fuzz_quiet_begin(void);
void fuzz_quiet_end(void);
#endif
