# Restores stream each checkpoint file once (src/ckpt/restore.c): a tiny Llama resumed with read
# chunks of 3 bytes to the default (DT_STORE_READ_CHUNK) gets exactly its checkpoint; headers
# that span chunks, damaged headers, headers that do not fit the model.
dt_test(NAME ckpt_restore_stream SOURCES ckpt/test_restore_stream.c LABELS "ckpt;e2e"
        TIMEOUT 120 ARGS ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR} FIXTURES_REQUIRED fortunes_data
        ENV "OMP_NUM_THREADS=1")

# trainer_state.json's one encoder/decoder (src/ckpt/state.c): round trip, absent keys, and one
# refused case per rule of the format.
dt_test(NAME ckpt_state_codec SOURCES ckpt/test_ckpt_state.c LABELS "ckpt;unit" TIMEOUT 60)
