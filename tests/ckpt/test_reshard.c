/* Resharding a checkpoint from 2 to 3 ranks (ZeRO stage 2, AdamW), through the C API.
 *
 *   mpirun -np 3 test_reshard CKPT_DIR CONFIG.yaml [key=value ...]
 *
 * CKPT_DIR is a local checkpoint directory written by a 2-rank ZeRO-2 run of the same config
 * (model.safetensors, optim-0000{0,1}-of-00002.safetensors, trainer_state.json). Every rank
 * creates the trainer with ckpt.resume=CKPT_DIR (dt_trainer_open resumes) and, before any
 * step, checks:
 *   - the flat parameters equal the checkpoint's model.safetensors, tensor by tensor by name,
 *     bit for bit, and every trainable parameter is in the file;
 *   - its optimizer slice [lo, hi) -- the 3-rank shard of the flat layout -- equals the
 *     concatenation of the 2 saved shards (each file's own lo/hi metadata says where it lies)
 *     at [lo, hi), bit for bit, for exp_avg and exp_avg_sq, and the optimizer step and the
 *     trainer's step are the checkpoint's;
 * then runs 3 steps: the loss stays finite and the step count goes on from the checkpoint's. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dtrain/dtrain.h"
#include "harness.h"

static int env_int(const char *a, const char *b) {
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    return v ? atoi(v) : -1;
}

/* A safetensors file's __metadata__ value (the API reads tensors, not metadata): the header is
 * a u64 little-endian length and that many bytes of JSON. */
static long long st_meta(const char *path, const char *key) {
    FILE *f = fopen(path, "rb");
    uint64_t hn = 0;
    long long v = -1;
    if (!f) return -1;
    if (fread(&hn, 8, 1, f) == 1 && hn < (1u << 24)) {
        char *h = malloc(hn + 1);
        if (h && fread(h, 1, hn, f) == hn) {
            h[hn] = 0;
            cJSON *o = cJSON_Parse(h);
            const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(o, "__metadata__"), key));
            if (s) v = atoll(s);
            cJSON_Delete(o);
        }
        free(h);
    }
    fclose(f);
    return v;
}

/* Flat parameters == model.safetensors, by name. */
static void check_params(dt_graph *g, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    dt_st_file *f = NULL;
    CHECK_OK(dt_st_open(path, &f));
    if (!f) return;
    size_t n;
    const float *flat = dt_graph_flat_param(g, &n);
    int np = dt_graph_param_count(g), trainable = 0, same = 0;
    size_t covered = 0;
    for (int i = 0; i < np; i++) {
        const dt_param_info *pi = dt_graph_param_info(g, i);
        if (pi->flags & (DT_PARAM_FROZEN | DT_PARAM_STATE)) continue;
        trainable++;
        dt_tensor src;
        if (dt_st_get(f, pi->name, &src) != DT_OK) {
            CHECK(0, "%s: %s", pi->name, dt_last_error());
            continue;
        }
        if (!CHECK(src.dtype == DT_F32 && (size_t)dt_tensor_numel(&src) == pi->numel,
                   "%s: %s of %lld elements in the checkpoint, %zu in the model", pi->name,
                   dt_dtype_name(src.dtype), (long long)dt_tensor_numel(&src), pi->numel))
            continue;
        CHECK(pi->offset + pi->numel <= n, "%s outside the flat buffer", pi->name);
        if (!memcmp(flat + pi->offset, src.data, pi->numel * sizeof(float)))
            same++;
        else
            CHECK(0, "%s: flat parameters differ from the checkpoint", pi->name);
        covered += pi->numel;
    }
    CHECK(same == trainable && trainable > 0, "%d of %d parameters restored bit for bit", same,
          trainable);
    CHECK(dt_st_count(f) == trainable, "checkpoint has %d tensors, the model %d trainable",
          dt_st_count(f), trainable);
    CHECK(covered == n, "parameters cover %zu of %zu flat elements", covered, n);
    dt_st_close(f);
}

/* Optimizer slice == the saved shards concatenated, at [lo, hi). */
static void check_optim(dt_optim *opt, const char *dir, int rank, int world, size_t n,
                        int64_t want_step) {
    dt_optim_state os;
    CHECK_OK(dt_optim_get_state(opt, &os));
    CHECK(os.kind == DT_OPTIM_ADAMW && os.n_buffers == 2, "expected AdamW state");
    CHECK(os.n_total == n, "optimizer over %zu elements, flat buffer %zu", os.n_total, n);
    size_t ss = dt_comm_shard_size(n, world), lo = (size_t)rank * ss;
    size_t hi = lo + ss < n ? lo + ss : n;
    CHECK(os.lo == lo && os.hi == hi, "rank %d of %d owns [%zu, %zu), expected [%zu, %zu)", rank,
          world, os.lo, os.hi, lo, hi);
    CHECK(os.step == want_step, "optimizer step %lld, checkpoint %lld", (long long)os.step,
          (long long)want_step);
    float *full[2] = {calloc(n, sizeof(float)), calloc(n, sizeof(float))};
    size_t next = 0; /* the shards must tile [0, n) in order */
    for (int r = 0; r < 2; r++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/optim-%05d-of-00002.safetensors", dir, r);
        long long flo = st_meta(path, "lo"), fhi = st_meta(path, "hi");
        if (!CHECK(flo == (long long)next && fhi > flo && (size_t)fhi <= n,
                   "%s: [%lld, %lld), expected to start at %zu (n %zu)", path, flo, fhi, next, n))
            continue;
        dt_st_file *f;
        if (dt_st_open(path, &f) != DT_OK) {
            CHECK(0, "%s", dt_last_error());
            continue;
        }
        for (int b = 0; b < 2; b++) {
            dt_tensor t;
            if (dt_st_get(f, os.names[b], &t) != DT_OK) {
                CHECK(0, "%s: %s", path, dt_last_error());
                continue;
            }
            if (CHECK(t.dtype == DT_F32 && dt_tensor_numel(&t) == fhi - flo,
                      "%s: %s has %lld elements, expected %lld", path, os.names[b],
                      (long long)dt_tensor_numel(&t), fhi - flo))
                memcpy(full[b] + flo, t.data, (size_t)(fhi - flo) * sizeof(float));
        }
        next = (size_t)fhi;
        dt_st_close(f);
    }
    CHECK(next == n, "the saved shards cover [0, %zu), expected [0, %zu)", next, n);
    for (int b = 0; b < 2; b++) {
        CHECK(!memcmp(os.buffers[b], full[b] + os.lo, (os.hi - os.lo) * sizeof(float)),
              "rank %d: %s [%zu, %zu) differs from the saved shards", rank, os.names[b], os.lo,
              os.hi);
        /* not a vacuous match: after the checkpoint's steps the moments are not all zero */
        int nonzero = 0;
        for (size_t i = 0; i < os.hi - os.lo && !nonzero; i++) nonzero = os.buffers[b][i] != 0;
        CHECK(nonzero, "rank %d: %s is all zero", rank, os.names[b]);
    }
    free(full[0]), free(full[1]);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: mpirun -np 3 test_reshard CKPT_DIR CONFIG.yaml [key=value ...]\n");
        return 2;
    }
    const char *dir = argv[1];
    int rank = env_int("OMPI_COMM_WORLD_RANK", "PMIX_RANK");
    int world = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
    char name[64];
    snprintf(name, sizeof name, "test_reshard rank %d", rank);
    if (!CHECK(world == 3 && rank >= 0, "run under mpirun -np 3 (world %d)", world))
        return dt_test_finish(name);

    /* the checkpoint's step and world size, from its trainer_state.json */
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    cJSON *state = dt_test_read_json(path);
    if (!CHECK(state, "cannot read %s", path)) return dt_test_finish(name);
    int64_t ck_step =
        (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(state, "step"));
    int64_t opt_step =
        (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(state, "optimizer_step"));
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(state, "world_size")) == 2 &&
              cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(state, "zero_stage")) == 2,
          "the checkpoint is not from a 2-rank ZeRO-2 run");
    CHECK(ck_step > 0 && opt_step == ck_step, "checkpoint step %lld, optimizer step %lld",
          (long long)ck_step, (long long)opt_step);
    cJSON_Delete(state);

    /* the config of the 2-rank run, resumed from its checkpoint on 3 ranks */
    int no = argc - 3;
    char **ov = calloc((size_t)no + 4, sizeof *ov);
    char resume[4200];
    snprintf(resume, sizeof resume, "ckpt.resume=%s", dir);
    for (int i = 0; i < no; i++) ov[i] = argv[3 + i];
    ov[no++] = resume;
    ov[no++] = "output.run_name=np3";
    ov[no++] = "ckpt.every_steps=0";
    dt_config *cfg = NULL;
    CHECK_OK(dt_config_from_args(argv[2], no, ov, &cfg));
    dt_trainer *t = NULL;
    if (cfg) CHECK_OK(dt_trainer_open(cfg, NULL, &t));
    if (!t) {
        dt_config_free(cfg), free(ov);
        return dt_test_finish(name);
    }
    CHECK(dt_trainer_progress(t)->step == ck_step, "resumed at step %lld, checkpoint %lld",
          (long long)dt_trainer_progress(t)->step, (long long)ck_step);

    dt_graph *g = dt_trainer_graph(t);
    size_t n;
    dt_graph_flat_param(g, &n);
    check_params(g, dir);
    check_optim(dt_trainer_optim(t), dir, rank, world, n, opt_step);

    /* it trains on */
    for (int s = 0; s < 3; s++) {
        dt_status st = dt_trainer_step(t);
        CHECK_OK(st);
        if (st != DT_OK) break;
        double loss = dt_trainer_progress(t)->loss;
        CHECK(isfinite(loss) && loss > 0, "step %lld: loss %g",
              (long long)dt_trainer_progress(t)->step, loss);
        if (rank == 0)
            printf("step %lld on 3 ranks: loss %.4f\n", (long long)dt_trainer_progress(t)->step,
                   loss);
    }
    CHECK(dt_trainer_progress(t)->step == ck_step + 3, "step %lld after 3 more, expected %lld",
          (long long)dt_trainer_progress(t)->step, (long long)ck_step + 3);
    dt_trainer_close(t);
    dt_config_free(cfg);
    free(ov);
    return dt_test_finish(name);
}
