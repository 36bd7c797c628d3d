/* The model registry: named models whose numbered versions point at a checkpoint (or any folder
 * of files) with a snapshot of where it came from, in the experiment store (include/dtrain/
 * track.h, schema version 3).
 *
 *   dt_registry_file f[] = {{"model.safetensors", 3276800, 0x1234...}, ...};
 *   dt_registry_source src = {.name = "fortunes", .run_id = run, .path = ckpt_dir,
 *                             .step = 600, .files = f, .n_files = 3};
 *   int v;
 *   dt_registry_register(store, &src, &v);                 // version 1, 2, ... of "fortunes"
 *   dt_registry_register_ref(store, "fortunes", NULL, "exp/run", stderr, &v);  // or a ckpt dir
 *   dt_registry_alias_set(store, "fortunes", v, "champion");
 *   dt_registry_version r;
 *   dt_registry_resolve(store, "fortunes@champion", &r);   // or NAME, NAME@3, NAME@latest
 *   dt_registry_verify(store, &r, report, NULL);           // re-hashes every recorded file
 *   dt_registry_version_free(&r);
 *
 * Why snapshots: a version must keep saying what it is after the run is resumed (its lineage
 * and params are replaced by each attempt) or deleted, so the run's lineage, params and metrics
 * are copied into the version as JSON when it is registered. Versions are immutable: there is no
 * update call, and triggers refuse UPDATE and DELETE of model_versions rows from any client.
 * Aliases are the one mutable part: a name pointing at a version, moved by setting it again.
 *
 * The integrity check is against the registration, not against the folder's own manifest: each
 * file's size and xxh3-64 are recorded in the version (for a checkpoint: trainer_state.json's
 * list, checked when registering, plus trainer_state.json itself), and the content hash is the
 * xxh3-64 of that list, so changing any file -- the manifest included -- is caught. */
#ifndef DTRAIN_REGISTRY_H
#define DTRAIN_REGISTRY_H

#include <stdint.h>
#include <stdio.h>
#include "dtrain/status.h"
#include "dtrain/track.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_registry_file {
    const char *name; /* a plain file name inside the artefact folder */
    int64_t bytes;
    uint64_t xxh3;
} dt_registry_file;

typedef struct dt_registry_source {
    const char *name;        /* the model: letters, digits, '.', '_', '-' (up to 128 bytes) */
    const char *description; /* kept when the model is new (NULL: none) */
    int64_t run_id;          /* the run the artefact came from; 0: none known */
    const char *path;        /* the artefact folder (a local path, made absolute) */
    int64_t step;            /* -1: none */
    const dt_registry_file *files;
    int n_files;
    /* {"loss": 2.3, ...}: the metrics at the artefact's step (a checkpoint's); NULL: the run's
     * final value of each metric */
    const char *metrics_json;
    /* the artefact's own resolved config (a checkpoint's trainer_state.json "config"): its
     * flattened keys are the version's params; NULL: the run's params */
    const char *config_yaml;
} dt_registry_source;

/* A version as read back. Strings are owned (dt_registry_version_free); JSON texts are objects
 * ({} when empty), files_json an array of {"name", "bytes", "xxh3"}. */
typedef struct dt_registry_version {
    char name[160];
    int version;
    int64_t run_id;     /* 0: none */
    char run[520];      /* "experiment/name" of the run when registered ("" when none) */
    int run_exists;     /* the run is still in the store */
    char path[4096];    /* the artefact folder */
    int64_t step;       /* -1: none */
    double created;     /* Unix seconds */
    char hash[17];      /* content hash, 16 hex digits */
    char aliases[1024]; /* "champion,prod" (sorted; "" when none) */
    char *lineage_json, *params_json, *metrics_json, *files_json;
} dt_registry_version;

void dt_registry_version_free(dt_registry_version *v);

/* A model of the registry. */
typedef struct dt_registry_model {
    const char *name, *description;
    double created;
    int versions, latest; /* count, newest version number (0: none) */
} dt_registry_model;
typedef int (*dt_registry_model_cb)(void *ud, const dt_registry_model *m);
/* Callbacks return 0 to go on. The version is valid during the call only. */
typedef int (*dt_registry_version_cb)(void *ud, const dt_registry_version *v);

/* Adds the next version of src->name (creating the model on its first version) in one
 * transaction: two registrations at once get different numbers. *version (may be NULL): its
 * number. Checks the name, the files' names and that each file exists with its recorded size
 * (the caller has verified their contents); errors name the model and the file. */
dt_status dt_registry_register(dt_track *s, const dt_registry_source *src, int *version);
/* Registers what `ref` names (src/registry/register.c): a checkpoint folder (step-*, local),
 * with the run that recorded it in the store if one did; or a run (dt_track_run_find's
 * reference): its newest recorded checkpoint that is committed and passes dt_ckpt_verify, each
 * newer one that fails being one line on `log` (may be NULL). The checkpoint is verified (every
 * file's xxh3) first; the version records trainer_state.json's file list plus trainer_state.json
 * itself, the checkpoint's metrics and its config as params. */
dt_status dt_registry_register_ref(dt_track *s, const char *name, const char *description,
                                   const char *ref, FILE *log, int *version);
/* Points `alias` of model `name` at `version` (moving it from another version). An alias is
 * 1-64 letters, digits, '.', '_', '-', not all digits and not "latest" (those are references). */
dt_status dt_registry_alias_set(dt_track *s, const char *name, int version, const char *alias);
/* DT_ERR_NOTFOUND when the model has no such alias. */
dt_status dt_registry_alias_remove(dt_track *s, const char *name, const char *alias);
/* Models by name. */
dt_status dt_registry_models(dt_track *s, dt_registry_model_cb cb, void *ud);
/* Versions of one model (NULL: of every model), by name and version. */
dt_status dt_registry_versions(dt_track *s, const char *name, dt_registry_version_cb cb, void *ud);
/* "NAME" (its latest version), "NAME@latest", "NAME@3", "NAME@alias" -> the version. A missing
 * model, version or alias is DT_ERR_NOTFOUND naming the reference. */
dt_status dt_registry_resolve(dt_track *s, const char *ref, dt_registry_version *out);

/* One file of a version that does not match its registration. */
typedef struct dt_registry_problem {
    const char *file; /* name inside the folder */
    const char *what; /* "missing", "size", "checksum", "unreadable" */
    int64_t bytes_recorded, bytes_found;
    uint64_t xxh3_recorded, xxh3_found;
} dt_registry_problem;
typedef void (*dt_registry_problem_cb)(void *ud, const dt_registry_problem *p);
/* Re-hashes every file the version records (reads every byte); each mismatching file goes to
 * cb (may be NULL). DT_OK when all match; else DT_ERR_FORMAT with a message naming the first
 * bad file and the count. */
dt_status dt_registry_verify(const dt_registry_version *v, dt_registry_problem_cb cb, void *ud);
/* Size and xxh3-64 of one file (streamed). */
dt_status dt_registry_hash_file(const char *path, int64_t *bytes, uint64_t *xxh3);

#ifdef __cplusplus
}
#endif
#endif
