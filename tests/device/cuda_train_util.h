/* Helpers of the trainer-level CUDA tests (tests/device/cuda_train_*.c): a tiny Llama and its
 * token data written into a folder, and the comparison of two runs' trained parameters. */
#ifndef DT_TEST_CUDA_TRAIN_UTIL_H
#define DT_TEST_CUDA_TRAIN_UTIL_H

#include <stddef.h>

/* model_dir/config.json (2 layers, 64 wide, GQA 4/2 heads, vocabulary vocab, tied embeddings,
 * 64 positions) and data_dir: a token dataset of 64 documents of 300 tokens, each an arithmetic
 * progression modulo vocab (both removed and written again). 0, or -1 after a failed CHECK. */
int cuda_train_write_tiny(const char *data_dir, const char *model_dir, int vocab);

/* got [n] against ref [n] after `steps` optimizer steps of learning rate lr: at most 1 in 1000
 * elements farther than 1e-4 max|ref| + 1e-3 |ref|, none farther than 2 lr steps (AdamW moves an
 * element whose gradient is near zero by about lr whatever that gradient's rounding). CHECKs
 * that name `what`; prints the largest error. */
void cuda_train_compare_params(const char *what, const float *ref, const float *got, size_t n,
                               double lr, int steps);

#endif
