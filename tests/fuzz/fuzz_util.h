/* Helpers shared by the fuzz targets (tests/fuzz/fuzz_*.c): a private temporary directory for
 * the parsers that take paths, file writing, and splitting one fuzz input into several files.
 *
 * Each target defines LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize); it is linked
 * either with libFuzzer (the DT_FUZZ build, clang) or with replay_main.c, which feeds it files
 * (the ordinary and ASan builds: CTest replays the corpus and the regression inputs). */
#ifndef DT_FUZZ_UTIL_H
#define DT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* optional in a target (weak: NULL when a target does not define it) */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The process's temporary directory ($TMPDIR, else /dev/shm, else /tmp), made on first use and
 * removed at exit. */
const char *fz_dir(void);
/* out = fz_dir() + "/" + name. */
void fz_path(char *out, size_t cap, const char *name);
/* Writes a whole file (creating or truncating it). Aborts on failure: a harness that cannot
 * write its input tests nothing. */
void fz_write(const char *path, const void *data, size_t n);
/* mkdir -p. */
void fz_mkdirs(const char *path);
/* Removes a file or a directory tree (no error if missing). */
void fz_rm(const char *path);
/* Splits data at every FZ_SEP into at most max parts (the last part keeps any further
 * separators); returns the count (>= 1). Lets one input carry several files. */
#define FZ_SEP "FUZZSPLIT"
int fz_split(const uint8_t *data, size_t n, const uint8_t **part, size_t *len, int max);
/* A NUL-terminated copy (malloc'd; aborts on out of memory). */
char *fz_strndup(const uint8_t *data, size_t n);

/* Uses a loaded tokenizer as the importers do: encodes a fixed text (special tokens allowed),
 * decodes it, adds Llama 3's chat tokens, asks the vocabulary size. */
typedef struct dt_tokenizer dt_tokenizer;
void fz_tokenizer_exercise(dt_tokenizer *t);

/* After an import that succeeded: every split under out (train, test; val if asked for) must
 * open with DT_DATA_VERIFY, else abort (the importer wrote what the reader refuses). */
void fz_check_import(const char *out, int val);

#endif
